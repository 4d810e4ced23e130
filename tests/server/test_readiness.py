"""Readiness means "can serve". `tritonrepo-client health` judges the models this
deployment serves (each READY and answering a probe inference), not Triton's server readiness,
which ``--strict-readiness=true`` (Triton's default, the container's) turns false when any
unrelated model fails to load. The module's server runs strict on purpose, like the container.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import (
    client_cli,
    key_file,
    require_artifacts,
    server_options,
    wait_for,
)
from tritonrepo.ctr import spec as ctr_spec
from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.server.launcher import TritonServer
from tritonrepo.text import spec
from tritonrepo_client import EmbeddingClient, RankingClient, RepositoryClient, TritonConnection
from tritonrepo_client.connection import ClientError
from tritonrepo_client.control.config_sets import probed_models
from tritonrepo_client.control.probe_declaration import PROBE_PARAMETER

pytestmark = pytest.mark.server
BROKEN = "broken_initialize"
BROKEN_CONFIG = {
    "name": BROKEN,
    "backend": "python",
    "max_batch_size": 0,
    "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [1]}],
    "output": [{"name": "Y", "data_type": "TYPE_FP32", "dims": [1]}],
}
BROKEN_MODEL_PY = b"""
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("initialize fails on purpose (test_readiness)")
"""


@pytest.fixture(scope="module")
def strict_server() -> Iterator[TritonServer]:
    """The three served models on a server with Triton's strict readiness (the container's)."""
    require_artifacts()
    options = server_options("test_readiness", extra_args=("--strict-readiness=true",))
    with TritonServer(options) as server:
        yield server


def cli(server: TritonServer, *args: str) -> subprocess.CompletedProcess:
    key = key_file(server, Path(server.options.log_file).parent)
    return client_cli("--url", server.options.http_url, "--repository-key-file", str(key), *args)


def repo_client(server: TritonServer) -> RepositoryClient:
    return RepositoryClient(server.options.http_url, key=server.options.repository_key)


def test_the_launcher_does_not_use_strict_readiness():
    command = TritonServer(server_options()).command(Path("/backends"))
    assert "--strict-readiness=false" in command
    assert "--strict-readiness=true" not in command


def test_an_unrelated_failed_load_does_not_flip_readiness(strict_server):
    """A new Python model whose initialize raises, loaded with a config and file override:
    the load fails and Triton's strict readiness turns false, but `health` probes every
    ensemble and exits 0, and the ensembles serve."""
    with (
        repo_client(strict_server) as repo,
        pytest.raises(ClientError, match="initialize fails on purpose"),
    ):
        repo.load(BROKEN, BROKEN_CONFIG, {"file:1/model.py": BROKEN_MODEL_PY})
    with TritonConnection(strict_server.options.http_url) as conn:
        assert not conn.server_ready(), "Triton's strict readiness should have turned false"
    out = cli(strict_server, "health")
    assert out.returncode == 0, out.stdout + out.stderr
    served = strict_server.options.models
    for model in served:
        assert f"ok   {model} inference:" in out.stdout, out.stdout
    assert f"ok   ready: all {len(served)} served models READY and answering" in out.stdout
    with EmbeddingClient(strict_server.options.http_url) as client:
        assert client.embed(["still serving"]).shape == (1, spec.HIDDEN_SIZE)
    with RankingClient(strict_server.options.http_url) as client:
        assert len(client.rank([1, 2], [3, 4, 5], 2).item_ids) == 2


def test_health_reports_every_failing_model_and_exits_1(strict_server):
    """A step unloaded: its ensemble's probe fails and is named, exit 1; the other models are
    still checked and pass; `health --live` passes."""
    with repo_client(strict_server) as repo:
        repo.unload(ctr_spec.POSTPROCESS_MODEL)
        repo.wait_until(ctr_spec.POSTPROCESS_MODEL, [1], timeout_s=30)
        try:
            # The served models named (an unload through the API takes a model out of the
            # default list, which is what is loaded).
            served = [arg for m in strict_server.options.models for arg in ("--model", m)]
            out = cli(strict_server, "health", *served)
            assert out.returncode == 1, out.stdout
            assert f"FAIL ready: cannot serve: {ctr_spec.RANKING_ENSEMBLE}\n" in out.stdout
            # The ensemble is not READY without its step, or READY with a failing probe.
            assert f"FAIL {ctr_spec.RANKING_ENSEMBLE} " in out.stdout, out.stdout
            assert f"ok   {spec.ENSEMBLE} inference:" in out.stdout
            assert f"ok   {ctr_spec.SESSION_MODEL} inference:" in out.stdout
            assert cli(strict_server, "health", "--live").returncode == 0
        finally:
            repo.load(ctr_spec.RANKING_ENSEMBLE)
    assert cli(strict_server, "health").returncode == 0


USER_ENSEMBLE = "user_embedding"
SLOW = "user_slow_initialize"
SLOW_MODEL_PY = b"""
import time
from pathlib import Path


class TritonPythonModel:
    def initialize(self, args):
        (Path(args["model_repository"]) / "initialize-started").touch()
        time.sleep(25)  # LOADING for 25 s (test_readiness)

    def execute(self, requests):
        return []
"""


def declared(probe: dict) -> dict:
    """A ``parameters`` entry declaring ``probe`` (docs/operations/health.md)."""
    return {PROBE_PARAMETER: {"string_value": json.dumps(probe)}}


def user_ensemble_config(repo: RepositoryClient, probe: dict | None) -> dict:
    """A user's ensemble: text_embedding's steps under another name, with ``probe``."""
    config = repo.config(spec.ENSEMBLE)
    config["name"] = USER_ENSEMBLE
    config["parameters"] = declared(probe) if probe is not None else {}
    return config


def test_a_users_model_is_probed_only_through_the_probe_it_declares(strict_server):
    """Without a declared probe `health --model <user ensemble>` says "ready, not probed" and
    never "answering"; with one it sends it and checks the declared output (a wrong declared
    value fails, so the inference is really made and compared). `configs use` gates on the
    same probes."""
    text_input = {"name": "TEXT", "datatype": "BYTES", "shape": [1, 1], "data": ["health check"]}
    with EmbeddingClient(strict_server.options.http_url) as client:
        vector = client.embed(["health check"])[0]
    output = {"name": "EMBEDDING", "datatype": "FP32", "shape": [1, spec.HIDDEN_SIZE]}
    right = {"inputs": [text_input], "outputs": [output | {"data": vector.tolist(), "atol": 1e-4}]}
    wrong_vector = vector.copy()
    wrong_vector[0] += 0.1
    wrong = {"inputs": [text_input], "outputs": [output | {"data": wrong_vector.tolist()}]}
    files = {"file:1/README": b"an ensemble has no files of its own"}
    with repo_client(strict_server) as repo:
        try:
            repo.load(USER_ENSEMBLE, user_ensemble_config(repo, None), files)
            out = cli(strict_server, "health", "--model", USER_ENSEMBLE)
            print(out.stdout)
            assert out.returncode == 0, out.stdout + out.stderr
            assert "answering" not in out.stdout, out.stdout
            assert f"{USER_ENSEMBLE} inference" not in out.stdout, out.stdout
            assert f"ok   {USER_ENSEMBLE} ready: model is READY" in out.stdout, out.stdout
            assert "ready, not probed" in out.stdout and PROBE_PARAMETER in out.stdout
            assert "not probed (user_embedding): no inference was sent" in out.stdout

            repo.load(USER_ENSEMBLE, user_ensemble_config(repo, right), files)
            out = cli(strict_server, "health", "--model", USER_ENSEMBLE, "--model", spec.ENSEMBLE)
            assert out.returncode == 0, out.stdout + out.stderr
            assert f"ok   {USER_ENSEMBLE} inference: declared probe answered: EMBEDDING" in (
                out.stdout
            )
            assert "ok   ready: all 2 served models READY and answering" in out.stdout
            with TritonConnection(strict_server.options.http_url) as conn:
                # The other loaded models that declare a probe, by name: every pipeline the
                # server serves (each declares one) and the user's ensemble.
                served = strict_server.options.models
                declaring = sorted({*served, USER_ENSEMBLE} - {spec.ENSEMBLE})
                assert probed_models(repo, conn, [spec.ENSEMBLE]) == [spec.ENSEMBLE, *declaring]
                assert {ctr_spec.RANKING_ENSEMBLE, ctr_spec.SESSION_MODEL} <= set(declaring)

            repo.load(USER_ENSEMBLE, user_ensemble_config(repo, wrong), files)
            out = cli(strict_server, "health", "--model", USER_ENSEMBLE)
            assert out.returncode == 1, out.stdout
            assert f"FAIL {USER_ENSEMBLE} inference: EMBEDDING differs from the declared" in (
                out.stdout
            )
            assert f"FAIL ready: cannot serve: {USER_ENSEMBLE}" in out.stdout
        finally:
            repo.unload(USER_ENSEMBLE)


USER_MODEL_PBTXT = """
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""


@pytest.fixture(scope="module")
def repository_server(tmp_path_factory) -> Iterator[TritonServer]:
    """A throwaway server on a temp repository: text_embedding's models (linked) plus two
    Python models of a user's, one whose initialize raises and one whose initialize takes
    25 s. (The repository index lists only the models of the server's repository folders,
    not models loaded by upload.)"""
    require_artifacts()
    root = Path(tmp_path_factory.mktemp("health-repository")) / "model_repository"
    for model in (spec.ENSEMBLE, spec.TOKENIZE_MODEL, spec.ENCODER_MODEL, spec.NORMALIZE_MODEL):
        (root / model).mkdir(parents=True)
        for entry in (MODEL_REPOSITORY / model).iterdir():
            if entry.name != "__pycache__":
                (root / model / entry.name).symlink_to(entry)
    for name, source in (("user_broken", BROKEN_MODEL_PY), (SLOW, SLOW_MODEL_PY)):
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(f'name: "{name}"' + USER_MODEL_PBTXT)
        (root / name / "1" / "model.py").write_bytes(source)
    options = server_options(
        "test_readiness_repository", model_repository=root, models=(spec.ENSEMBLE,)
    )
    with TritonServer(options) as server:
        yield server


def test_models_stuck_loading_or_failed_are_named_without_failing_the_verdict(
    repository_server,
):
    """A model not served that failed to load (UNAVAILABLE with a reason) gets a WARN line
    naming it; a load that runs for the whole check (Triton holds the repository index until
    it ends) gets a WARN line saying so instead of hanging the check; the served models'
    verdict stays ok, exit 0, in both cases. With a key the server refuses, the index cannot
    be read, and health says so."""
    server = repository_server
    with repo_client(server) as repo:
        with pytest.raises(ClientError, match="initialize fails on purpose"):
            repo.load("user_broken")
        out = cli(server, "health", "--model", spec.ENSEMBLE)
        print(out.stdout)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "WARN user_broken state: version 1 UNAVAILABLE: " in out.stdout, out.stdout
        assert "initialize fails on purpose" in out.stdout
        assert "ok   ready: all 1 served models READY and answering" in out.stdout

        marker = Path(server.options.model_repository) / SLOW / "initialize-started"
        marker.unlink(missing_ok=True)
        loading = threading.Thread(target=repo.load, args=(SLOW,), daemon=True)
        loading.start()
        try:
            # Triton runs the model's initialize (it then sleeps 25 s, the model LOADING).
            wait_for(f"{SLOW}'s initialize", marker.exists, deadline_s=60)
            started = time.monotonic()
            out = cli(server, "health", "--model", spec.ENSEMBLE)
            print(out.stdout)
            assert time.monotonic() - started < 20, "health waited for the load to end"
            assert out.returncode == 0, out.stdout + out.stderr
            # Triton answers the index with the LOADING row, or holds it until the load ends.
            named = f"WARN {SLOW} state: version 1 LOADING throughout this check" in out.stdout
            held = "WARN repository index: no answer within 5 s" in out.stdout
            assert named or (held and "stuck LOADING?" in out.stdout), out.stdout
            assert "ok   ready: all 1 served models READY and answering" in out.stdout
        finally:
            loading.join(timeout=60)
    assert not loading.is_alive()
    out = cli(server, "health", "--model", spec.ENSEMBLE)
    assert out.returncode == 0 and "repository index" not in out.stdout, out.stdout
    assert f"{SLOW} state" not in out.stdout and "WARN user_broken state" in out.stdout

    env = {k: v for k, v in os.environ.items() if not k.startswith("TRITONREPO_")}
    wrong_key = Path(server.options.log_file).parent / "wrong.key"
    wrong_key.write_text("not-the-key")
    args = ("--url", server.options.http_url, "--repository-key-file", str(wrong_key), "health")
    no_key = client_cli(*args, "--model", spec.ENSEMBLE, env=env)
    assert no_key.returncode == 0, no_key.stdout + no_key.stderr
    assert "WARN repository index: not read" in no_key.stdout, no_key.stdout
