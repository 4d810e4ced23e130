"""A model stuck LOADING must not switch self-healing off for the models that are served.

On Triton 2.51 a Python model whose version folder has no ``model.py`` never finishes loading,
and the HTTP load call that started it never returns. Triton runs that call on the frontend
thread of its connection, so the keep-alive connections that thread serves (the supervisor's,
opened while the server was idle) stop getting answers to any request. Before the supervisor
bounded its calls, its pass then waited on the repository index for the client's 300 s and a
killed stub of ``text_embedding`` stayed dead for minutes.

A throwaway server (``text_embedding`` only, supervised every second) whose repository has one
more model, ``stuck_model``: a copy of the pool step's config without ``model.py``. Another
client loads it and goes away (as ``tritonrepo-client --timeout 60 models load`` does); then a
stub of text_embedding is killed.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require_artifacts, server_options
from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.server.launcher import TritonServer
from tritonrepo.text import spec
from tritonrepo_client import RepositoryClient, TritonConnection
from tritonrepo_client.connection import ClientError
from tritonrepo_client.control.healing.healer import Healer
from tritonrepo_client.control.health import probe_for

pytestmark = pytest.mark.server
STUCK = "stuck_model"
# From the kill to the supervisor's report: the stub watch names the dead stub, the reload
# (~2 s on two cores) runs on a connection of its own and text_embedding serves again (measured:
# ~4 s); the re-probe on the supervisor's keep-alive connection, which the stuck load blocks,
# times out once (30 s) and is tried again on a new one before the report. Measured: ~35 s.
RECOVERY_BOUND_S = 90.0
# The other client's deadline for the load that never returns.
STUCK_CLIENT_TIMEOUT_S = 10.0

LOAD_AND_GO = """
import sys
import tritonclient.http as httpclient
url, model, key_header, key, timeout = sys.argv[1:6]
client = httpclient.InferenceServerClient(url, network_timeout=float(timeout))
try:
    client.load_model(model, headers={key_header: key} if key else None)
except Exception as exc:
    print(f"gave up: {type(exc).__name__}")
    sys.exit(3)
"""


@pytest.fixture
def stuck_server(tmp_path) -> Iterator[TritonServer]:
    """text_embedding, supervised every second, on a repository that also holds a Python model
    without model.py (never loaded at start: the preflight would refuse it)."""
    require_artifacts()
    repo = tmp_path / "repository"
    repo.mkdir()
    for model in (spec.ENSEMBLE, spec.TOKENIZE_MODEL, spec.ENCODER_MODEL, spec.NORMALIZE_MODEL):
        (repo / model).symlink_to(MODEL_REPOSITORY / model, target_is_directory=True)
    (repo / STUCK / "1").mkdir(parents=True)
    config = (MODEL_REPOSITORY / spec.NORMALIZE_MODEL / "config.pbtxt").read_text()
    (repo / STUCK / "config.pbtxt").write_text(
        config.replace(f'name: "{spec.NORMALIZE_MODEL}"', f'name: "{STUCK}"')
    )
    options = server_options(
        "test_healing_stuck_load",
        model_repository=repo,
        models=(spec.ENSEMBLE,),
        heal_interval_s=1.0,
        heal_backoff_s=2.0,
        # A stuck model never unloads: Triton waits out its whole exit timeout on SIGTERM.
        exit_timeout_s=5,
    )
    with TritonServer(options) as server:
        yield server


def stuck_state(server: TritonServer) -> str:
    """The stuck model's state in the repository index (a fresh connection)."""
    o = server.options
    with RepositoryClient(o.http_url, key=o.repository_key, timeout_s=10.0) as repo:
        return ",".join(r.state for r in repo.index() if r.name == STUCK) or "absent"


def serves(server: TritonServer) -> str | None:
    """None when text_embedding answers its probe on a fresh connection, else the error."""
    with TritonConnection(server.options.http_url, "http", timeout_s=10.0) as conn:
        try:
            probe_for(conn, spec.ENSEMBLE)(conn, spec.ENSEMBLE)
        except ClientError as exc:
            return str(exc)
    return None


def test_a_model_stuck_loading_does_not_stop_healing_the_served_ones(stuck_server):
    """Another client's load of the stuck model gives up; the model stays LOADING. A killed
    tokenize stub is then reloaded by the supervisor and text_embedding serves again within
    the bound, while the stuck model is still LOADING and was never loaded again."""
    o = stuck_server.options
    header, key = next(iter(o.repository_headers.items()), ("", ""))
    other = subprocess.run(
        [sys.executable, "-c", LOAD_AND_GO, o.http_url, STUCK, header, key,
         str(STUCK_CLIENT_TIMEOUT_S)],
        capture_output=True, text=True, timeout=STUCK_CLIENT_TIMEOUT_S + 60,
    )  # fmt: skip
    assert other.returncode == 3, other.stdout + other.stderr  # its load never returned
    assert stuck_state(stuck_server) == "LOADING"
    assert serves(stuck_server) is None

    instance = f"{spec.TOKENIZE_MODEL}_0_0"
    pid = next(s.pid for s in stuck_server.stub_processes() if s.instance == instance)
    seen = len(stuck_server.heal_reports)
    killed_at = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    error = "not probed yet"
    while time.monotonic() - killed_at < RECOVERY_BOUND_S:
        time.sleep(1.0)
        error = serves(stuck_server)
        if error is None:
            break
    recovered_s = time.monotonic() - killed_at
    assert error is None, (
        f"text_embedding still failing {RECOVERY_BOUND_S:.0f} s after the kill: {error}; "
        f"supervisor reports: {stuck_server.heal_reports[seen:]}"
    )
    while time.monotonic() - killed_at < RECOVERY_BOUND_S:  # the pass ends after its re-probe
        if any(r.ok for r in stuck_server.heal_reports[seen:]):
            break
        time.sleep(0.5)
    reported_s = time.monotonic() - killed_at
    reports = stuck_server.heal_reports[seen:]
    print(
        f"\nkill -> text_embedding serves again: {recovered_s:.1f} s, reported: "
        f"{reported_s:.1f} s; reports: {reports}"
    )
    restored = [r for r in reports if r.ok]
    assert [r.step for r in restored] == [spec.TOKENIZE_MODEL], reports
    assert all(r.step != STUCK for r in stuck_server.heal_reports)
    assert stuck_state(stuck_server) == "LOADING"  # the limit: only a restart clears it
    new_pid = next(s.pid for s in stuck_server.stub_processes() if s.instance == instance)
    assert new_pid != pid


@pytest.fixture
def step_copies_server(tmp_path) -> Iterator[TritonServer]:
    """text_embedding without a supervisor, its tokenize and pool steps copies a test breaks."""
    require_artifacts()
    repo = tmp_path / "repository"
    repo.mkdir()
    for model in (spec.ENSEMBLE, spec.ENCODER_MODEL):
        (repo / model).symlink_to(MODEL_REPOSITORY / model, target_is_directory=True)
    for model in (spec.TOKENIZE_MODEL, spec.NORMALIZE_MODEL):
        shutil.copytree(
            MODEL_REPOSITORY / model, repo / model, ignore=shutil.ignore_patterns("__pycache__")
        )
    options = server_options(
        "test_healing_stuck_reload", model_repository=repo, models=(spec.ENSEMBLE,),
        exit_timeout_s=5,
    )  # fmt: skip
    with TritonServer(options) as server:
        yield server


def test_a_reload_that_never_returns_is_abandoned_and_not_sent_again(step_copies_server):
    """Both steps' stubs die and tokenize's model.py is gone, so its reload never returns: the
    pass abandons it at ``reload_timeout_s`` and reports it, goes on with the pool step, and
    ends within a bound; the next pass sends no second load behind the stuck one (it would
    wait for it, holding another of Triton's HTTP threads)."""
    server = step_copies_server
    o = server.options
    (Path(o.model_repository) / spec.TOKENIZE_MODEL / "1" / "model.py").unlink()
    dead = [f"{spec.TOKENIZE_MODEL}_0_0", f"{spec.NORMALIZE_MODEL}_0_0"]
    for stub in server.stub_processes():
        if stub.instance in dead:
            os.kill(stub.pid, signal.SIGKILL)
    with RepositoryClient(o.http_url, key=o.repository_key) as repo:
        healer = Healer(repo, (spec.ENSEMBLE,), dead_instances=lambda: dead, reload_timeout_s=5.0)
        started = time.monotonic()
        report = healer.heal_once()
        took = time.monotonic() - started
        steps = {s.step: s for s in report.steps}
        print(f"\npass: {took:.1f} s; " + "; ".join(s.line() for s in report.steps))
        assert set(steps) == {spec.TOKENIZE_MODEL, spec.NORMALIZE_MODEL}, report.steps
        tokenize = steps[spec.TOKENIZE_MODEL]
        assert tokenize.outcome == "failed", tokenize
        assert "did not finish within 5 s" in tokenize.detail, tokenize
        assert steps[spec.NORMALIZE_MODEL].reload_s is not None  # tried too, not skipped
        assert took < 60.0, f"pass took {took:.0f} s"
        assert not report.healthy
        time.sleep(healer.backoff_s * 2 + 1)  # past the backoff: only the stuck load holds it
        again = {s.step: s for s in healer.heal_once().steps}
        assert again[spec.TOKENIZE_MODEL].outcome == "gave up", again
        assert "not sending another" in again[spec.TOKENIZE_MODEL].detail, again
        assert again[spec.TOKENIZE_MODEL].reload_s is None  # no second load was sent
