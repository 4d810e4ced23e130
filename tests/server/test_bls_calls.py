"""A model that calls another through BLS, served alone: ``ctr_session`` declares in its CPU
config that it calls ``ctr_model`` (parameter ``tritonrepo_calls``), and everything that loads
models follows that declaration (:mod:`tritonrepo_client.control.model_calls`): the launcher
started with ``ctr_session`` alone loads ``ctr_model`` too, health names the missing called model
as the caller's problem, ``models load`` loads the called model first, ``models unload
--dependents`` unloads it when nothing else uses it, and self-healing attributes a dead
``ctr_model`` to ``ctr_session``.

Without the declaration the launcher's start fails on its health probe: "ctr_session inference
failed: ... Model 'ctr_model' is not ready".
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from tests.conftest import client_cli, key_file, require_artifacts, server_options
from tritonrepo.ctr import spec as ctr_spec
from tritonrepo.server.launcher import TritonServer
from tritonrepo_client import RepositoryClient, SessionClient
from tritonrepo_client.connection import TritonConnection
from tritonrepo_client.control.healing.healer import Healer
from tritonrepo_client.control.health import check_health

pytestmark = pytest.mark.server

SESSION, CORE = ctr_spec.SESSION_MODEL, ctr_spec.CORE_MODEL
CANDIDATES = [11, 222, 3333, 4444]


@pytest.fixture(scope="module")
def server() -> Iterator[TritonServer]:
    """The shipped repository (CPU config set) served with ``ctr_session`` alone."""
    require_artifacts()
    with TritonServer(server_options("test_bls_calls", models=(SESSION,))) as server:
        yield server


def repo_client(server: TritonServer) -> RepositoryClient:
    return RepositoryClient(server.options.http_url, "http", key=server.options.repository_key)


def ready(server: TritonServer) -> set[str]:
    with repo_client(server) as repo:
        return {r.name for r in repo.index(30) if r.state == "READY"}


def cli(server: TritonServer, *args: str):
    key = key_file(server, server.options.log_file.parent)
    return client_cli("--url", server.options.http_url, "--repository-key-file", str(key), *args)


def assert_session_serves(server: TritonServer) -> None:
    """A two-event session: every candidate ranked, CTRs probabilities in descending order."""
    with SessionClient(server.options.http_url, "http") as sessions:
        session = sessions.session(f"bls-{np.random.default_rng().integers(1 << 40)}")
        for k, item in enumerate((5, 50)):
            ranking = session.send(item, CANDIDATES, end=k == 1)
            assert sorted(ranking.item_ids.tolist()) == CANDIDATES
            assert ((ranking.scores > 0) & (ranking.scores < 1)).all()
            assert (np.diff(ranking.scores) <= 0).all()


def test_served_alone_it_starts_with_the_model_it_calls(server: TritonServer):
    assert server.options.models == (SESSION,)
    assert server.options.load_models == (CORE, SESSION)
    assert {SESSION, CORE} <= ready(server)
    assert_session_serves(server)


def test_self_healing_attributes_the_called_model_to_its_caller(server: TritonServer):
    with repo_client(server) as repo:
        healer = Healer(repo, models=(SESSION,))
        # ctr_model is run by ctr_session (a BLS call it declares), not by "all served models".
        assert healer._served_by(CORE) == (CORE, SESSION)


def test_health_names_a_called_model_that_is_not_ready_as_the_callers_problem(server):
    with repo_client(server) as repo:
        repo.unload(CORE, timeout_s=120)
        try:
            with TritonConnection(server.options.http_url, "http") as conn:
                checks = {c.name: c for c in check_health(conn, (SESSION,), repository=repo)}
            calls = checks[f"{SESSION} calls"]
            assert not calls.ok
            assert f"{SESSION} calls {CORE} through BLS" in calls.detail
            assert f"tritonrepo-client models load {CORE}" in calls.detail
            assert not checks["ready"].ok and SESSION in checks["ready"].detail
        finally:
            # `models load ctr_session` (loaded, so its served config is read) loads ctr_model.
            result = cli(server, "models", "load", SESSION)
    assert result.returncode == 0, result.stderr
    assert f"loaded {CORE} ({SESSION} calls it through BLS)" in result.stdout
    assert {SESSION, CORE} <= ready(server)
    assert_session_serves(server)


def test_unload_dependents_unloads_the_called_model_and_load_brings_it_back(server):
    result = cli(server, "models", "unload", SESSION, "--dependents")
    assert result.returncode == 0, result.stderr
    assert not {SESSION, CORE} & ready(server)
    # Neither loaded: the local repository's configs (--model-config-name cpu) name the call.
    result = cli(server, "models", "load", SESSION)
    assert result.returncode == 0, result.stderr
    assert f"loaded {CORE} ({SESSION} calls it through BLS)" in result.stdout
    assert {SESSION, CORE} <= ready(server)
    assert_session_serves(server)
