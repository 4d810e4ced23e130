"""Self-healing and the models a user loads, unloads or switches at runtime.

While Triton 2.51 loads a Python model it runs a short-lived stub named after the bare model
(it exits when the load ends). A stub watch that took that stub for an instance that died
reloaded the model on every pass, for as long as the server ran: a pipeline loaded at runtime
was reloaded every ~16 s, an unload was undone, a ``configs use`` set it off for every step, and
each reload of ``ctr_session`` dropped its open sessions. These tests drive the supervisor
(a pass every second) through loads whose short-lived stub it is sure to see: the repository's
``breast_cancer_preprocess`` is a copy whose ``model.py`` takes several seconds to import, so
its bare stub lives through several passes.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Iterator

import pytest

from tests.conftest import client_cli, key_file, require_artifacts, server_options
from tritonrepo.ctr import spec as ctr_spec
from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.server.launcher import TritonServer
from tritonrepo_client import RepositoryClient, SessionClient

pytestmark = pytest.mark.server

PIPELINE = "breast_cancer"
SLOW_STEP = "breast_cancer_preprocess"
IMPORT_S = 4.0  # how long the slow step's model.py takes to import: four heal passes
QUIET_S = 35.0  # time without a single reload after the loads: two of the ~16 s cycles of the bug


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[TritonServer]:
    """ctr_session (with ctr_model, which it calls through BLS) served and supervised (a pass
    every second) on a repository of its own: symlinks to the built models, a slow-import
    copy of ``breast_cancer_preprocess``, and ``breast_cancer`` as its ensemble in every set."""
    require_artifacts()
    repo = tmp_path_factory.mktemp("repository")
    for model in MODEL_REPOSITORY.iterdir():
        if model.name not in (SLOW_STEP, PIPELINE) and (model / "config.pbtxt").is_file():
            (repo / model.name).symlink_to(model, target_is_directory=True)
    # The pipeline as its ensemble on CPU too (without its CPU set's one-step model), so that
    # loading it loads its Python steps.
    shutil.copytree(MODEL_REPOSITORY / PIPELINE, repo / PIPELINE,
                    ignore=shutil.ignore_patterns("configs", "__pycache__"))  # fmt: skip
    slow = repo / SLOW_STEP
    shutil.copytree(
        MODEL_REPOSITORY / SLOW_STEP, slow, ignore=shutil.ignore_patterns("__pycache__")
    )
    source = (slow / "1" / "model.py").read_text()
    (slow / "1" / "model.py").write_text(f"import time\n\ntime.sleep({IMPORT_S})\n{source}")
    options = server_options(
        "test_healing_runtime_loads",
        model_repository=repo,
        models=(ctr_spec.SESSION_MODEL, ctr_spec.CORE_MODEL),
        heal_interval_s=1.0,
        heal_backoff_s=2.0,
    )
    with TritonServer(options) as server:
        yield server


def repo_client(server: TritonServer) -> RepositoryClient:
    return RepositoryClient(
        server.options.http_url, "http", key=server.options.repository_key or ""
    )


def cli(server: TritonServer, *args: str):
    """``tritonrepo-client ARGS`` against ``server`` with its repository key."""
    key = key_file(server, server.options.log_file.parent)
    return client_cli(
        "--url", server.options.http_url, "--repository-key-file", str(key), *args
    )  # fmt: skip


def state(server: TritonServer, model: str) -> str:
    with repo_client(server) as repo:
        return next((r.state for r in repo.index(30) if r.name == model), "")


def load_seeing_the_bare_stub(server: TritonServer, model: str) -> set[str]:
    """Load ``model`` through the load API; return the bare-model stubs seen while it loaded
    (scanned every 50 ms, as the supervisor's watch scans every pass)."""
    import threading

    seen: set[str] = set()
    done = threading.Event()

    def scan() -> None:
        while not done.is_set():
            seen.update(s.instance for s in server.stub_processes())
            time.sleep(0.05)

    scanner = threading.Thread(target=scan, daemon=True)
    scanner.start()
    try:
        with repo_client(server) as repo:
            repo.load(model, timeout_s=120)
    finally:
        done.set()
        scanner.join(5)
    return seen


def reloads_since(server: TritonServer, seen: int) -> list:
    return list(server.heal_reports[seen:])


def test_runtime_loads_switches_and_reloads_leave_the_healer_quiet_and_sessions_open(server):
    """A pipeline loaded at runtime (its bare stub seen for seconds), ``configs use cpu`` and an
    unload/load of ``ctr_session``: then 35 s without a single reload, and sessions opened
    after the loads keep going (their next event needs no START)."""
    seen_reports = len(server.heal_reports)
    bare = load_seeing_the_bare_stub(server, PIPELINE)
    assert SLOW_STEP in bare, f"the load's bare stub was not seen: {sorted(bare)}"
    assert state(server, PIPELINE) == "READY"

    switched = cli(server, "configs", "use", "cpu")
    assert switched.returncode == 0, switched.stdout + switched.stderr
    for action in ("unload", "load"):
        done = cli(server, "models", action, ctr_spec.SESSION_MODEL)
        assert done.returncode == 0, done.stdout + done.stderr

    with SessionClient(server.options.http_url, "http", timeout_s=30) as client:
        sessions = [client.session(f"user-{i}") for i in range(3)]
        for i, session in enumerate(sessions):
            session.send(10 + i, [20, 21 + i])
        quiet_from = len(server.heal_reports)
        deadline = time.monotonic() + QUIET_S
        while time.monotonic() < deadline:
            assert not reloads_since(server, quiet_from), reloads_since(server, quiet_from)
            time.sleep(1.0)
        for i, session in enumerate(sessions):
            ranking = session.send(15, [30, 31 + i], end=True)
            assert len(ranking.item_ids) == 2
    assert not reloads_since(server, seen_reports), reloads_since(server, seen_reports)


def test_a_killed_stub_of_a_pipeline_loaded_at_runtime_is_healed_for_that_pipeline(server):
    """SIGKILL a stub of the pipeline loaded at runtime: the supervisor reloads that step and
    names the pipeline as the model it served."""
    if state(server, PIPELINE) != "READY":
        load_seeing_the_bare_stub(server, PIPELINE)
    step = f"{PIPELINE}_postprocess"
    victim = next(s for s in server.stub_processes() if s.instance == f"{step}_0_0")
    seen = len(server.heal_reports)
    os.kill(victim.pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        restored = [r for r in reloads_since(server, seen) if r.step == step and r.ok]
        if restored:
            assert restored[0].served == (PIPELINE,), restored[0].line()
            assert all(r.step == step for r in reloads_since(server, seen))
            return
        time.sleep(0.2)
    raise AssertionError(f"{step} not restored in 60 s: {reloads_since(server, seen)}")


def test_an_unload_with_its_dependents_is_not_undone(server):
    """``models unload PIPELINE --dependents`` stays done: after ten passes neither the ensemble
    nor any of its steps is loaded again."""
    if state(server, PIPELINE) != "READY":
        load_seeing_the_bare_stub(server, PIPELINE)
    seen = len(server.heal_reports)
    done = cli(server, "models", "unload", PIPELINE, "--dependents")
    assert done.returncode == 0, done.stdout + done.stderr
    steps = (PIPELINE, SLOW_STEP, f"{PIPELINE}_model", f"{PIPELINE}_postprocess")
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        loaded = {m: state(server, m) for m in steps}
        assert not any(s in ("READY", "LOADING") for s in loaded.values()), loaded
        time.sleep(0.5)
    assert not reloads_since(server, seen), reloads_since(server, seen)
