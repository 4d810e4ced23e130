"""Fixtures: a real tritonserver (the project's launcher) and the reference implementation."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Iterator
from pathlib import Path

import numpy as np
import pytest

from tests import cpu_seconds, server_crashes
from tritonrepo.description import discover, load
from tritonrepo.paths import BUILD_DIR, MODEL_REPOSITORY, PIPELINES
from tritonrepo.server.launcher import ServerOptions, TritonServer, free_port
from tritonrepo.text import spec

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


NEEDS_GPU = pytest.mark.skipif(
    not _cuda_available(), reason="needs a CUDA GPU: run `make test-gpu` on a GPU host"
)
GPU_SERVER_MARKS = [pytest.mark.server, pytest.mark.gpu, NEEDS_GPU]  # a module's pytestmark


def require_artifacts() -> None:
    """Fail (not skip) when the built artifacts are missing: `make test` builds them."""
    for version in spec.ENCODER_VERSIONS:
        onnx_file = MODEL_REPOSITORY / spec.ENCODER_MODEL / str(version) / "model.onnx"
        if not onnx_file.is_file():
            pytest.fail(f"{onnx_file} is missing: run `make artifacts` (make test does it)")


def require_guard() -> None:
    """Fail (not skip) when the HTTP guard cannot run here (nginx or its njs module missing):
    `make test` installs them (`make guard-deps`), so a missing one is a broken setup."""
    from tritonrepo.server.http_guard import guard_available

    missing = guard_available()
    if missing:
        pytest.fail(f"the HTTP guard cannot run here: {missing} (make test runs make guard-deps)")


# What the test servers serve unless a test names its models: the pipelines whose tests are this
# repository's server tests (`tests = false` in their description: text_embedding, ctr_ranking,
# ctr_session, image_classification). The other described pipelines' generated tests start
# servers of their own (tests/pipeline_suite.py), so the shared servers do not load them.
SERVER_TESTED = tuple(p.name for p in map(load, discover(PIPELINES)) if not p.tests)


# Triton's exit timeout of the test servers, seconds: a server left with a model Triton cannot
# unload (one whose dead Python stub a test's request reached) or an HTTP connection a test left
# open waits it out at its stop, then exits 1. A test of the stop itself passes its own (30 s,
# Triton's default, so that waiting it out cannot pass for a clean stop).
TEST_EXIT_TIMEOUT_S = 5


def free_ports(count: int, avoid: Collection[int | None] = ()) -> list[int]:
    """``count`` ports free right now, each unlike the others and unlike ``avoid``: the system
    may hand out a port it just gave again (seen: HTTP and gRPC on one port, and tritonserver
    refusing to start)."""
    ports: list[int] = []
    for _ in range(count):
        ports.append(free_port(avoid=[*avoid, *ports]))
    return ports


def server_options(
    name: str = "tritonserver", *, heal_metrics: bool = False, **overrides
) -> ServerOptions:
    """Options for a test server on free ports with a random repository key, serving
    :data:`SERVER_TESTED`, logging to build/test-logs/<name>.log (<name>-<worker>.log on a
    pytest-xdist worker: each worker has a session server of its own), with Triton's exit
    timeout at :data:`TEST_EXIT_TIMEOUT_S`; ``heal_metrics``: the supervisor's metrics on a
    free port of their own too (unlike the other three)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    ports = free_ports(4)
    defaults = {
        "models": SERVER_TESTED,
        "http_port": ports[0],
        "grpc_port": ports[1],
        "metrics_port": ports[2],
        "heal_metrics_port": ports[3] if heal_metrics else None,
        "log_file": BUILD_DIR / "test-logs" / (f"{name}-{worker}.log" if worker else f"{name}.log"),
        "repository_key": secrets.token_urlsafe(16),
        "exit_timeout_s": TEST_EXIT_TIMEOUT_S,
    }
    return ServerOptions(**{**defaults, **overrides})


def client_cli(
    *args: str, stdin: str | None = None, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """Run ``python -m tritonrepo_client ARGS`` as a user would; text output captured."""
    return subprocess.run(
        [sys.executable, "-m", "tritonrepo_client", *args],
        input=stdin, capture_output=True, text=True, timeout=timeout, env=env,
    )  # fmt: skip


def key_file(server: TritonServer, directory: Path) -> Path:
    """A file holding ``server``'s repository key, for ``--repository-key-file``."""
    path = directory / f"{server.options.http_port}.key"
    path.write_text(server.options.repository_key or "")
    return path


def wait_for(what: str, condition: Callable[[], bool], deadline_s: float) -> float:
    """Poll ``condition`` every 0.1 s until it is true; the seconds that took.

    Raises:
        AssertionError: not true within ``deadline_s`` seconds (``what`` says what).
    """
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > deadline_s:
            raise AssertionError(f"{what} not reached within {deadline_s:.0f} s")
        time.sleep(0.1)
    return time.monotonic() - start


@pytest.fixture(scope="session")
def triton_server() -> Iterator[TritonServer]:
    """The embedded tritonserver with `text_embedding` loaded (CPU configs), for the session."""
    require_artifacts()
    with TritonServer(server_options()) as server:
        yield server


@pytest.fixture(scope="module")
def control_server(request) -> Iterator[TritonServer]:
    """A server of the module's own, for tests that load, unload or roll out models: serving
    the module's ``CONTROL_SERVER_MODELS`` (the models its tests use; the ones they call are
    loaded with them), else :data:`SERVER_TESTED`."""
    require_artifacts()
    models = getattr(request.module, "CONTROL_SERVER_MODELS", SERVER_TESTED)
    with TritonServer(server_options(Path(request.module.__file__).stem, models=models)) as server:
        yield server


@pytest.fixture(scope="session")
def reference_model():
    """sentence-transformers' own all-MiniLM-L6-v2, loaded offline from the wheel."""
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(spec.source_model_dir()), device="cpu")


@pytest.fixture(scope="session")
def reference_embed(reference_model):
    """texts -> FP32 [n, 384] from sentence-transformers encode(normalize_embeddings=True)."""

    def embed(texts: list[str]) -> np.ndarray:
        return reference_model.encode(
            list(texts), normalize_embeddings=True, convert_to_numpy=True, batch_size=16
        )

    return embed


def file_order(seconds: dict[str, float], files: list[str]) -> list[str]:
    """``files`` (paths relative to the checkout) longest first: by their measured ``seconds``
    (``tests/data/file_seconds.json``); a file not measured yet counts as long as its folder's
    longest measured file (new files are most often server files, and a long file handed out
    last is what keeps one worker running alone at the end). Ties keep the given order."""
    longest: dict[str, float] = {}
    for name, value in seconds.items():
        folder = name.rsplit("/", 1)[0]
        longest[folder] = max(longest.get(folder, 0.0), value)

    def guess(name: str) -> float:
        return seconds.get(name, longest.get(name.rsplit("/", 1)[0], 0.0))

    return sorted(files, key=lambda name: -guess(name))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The files longest first, by their seconds measured in an earlier run
    (``tests/data/file_seconds.json``, written by ``python -m tests.durations --save``); the
    order within a file is kept. `make test` hands whole files to its pytest-xdist workers in
    this order (``--dist loadfile --no-loadscope-reorder``), so the short files fill the end."""
    from tests.durations import FILE_SECONDS

    seconds = json.loads(FILE_SECONDS.read_text()) if FILE_SECONDS.is_file() else {}
    names = {id(item): item.path.relative_to(config.rootpath).as_posix() for item in items}
    rank = {
        name: i for i, name in enumerate(file_order(seconds, list(dict.fromkeys(names.values()))))
    }
    items.sort(key=lambda item: rank[names[id(item)]])
    if config.pluginmanager.hasplugin("rerunfailures"):
        for item in items:
            if item.get_closest_marker("server"):
                item.add_marker(server_crashes.rerun_marker())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> pytest.TestReport:
    """A failed test whose server died: the death in its report, the server started again
    (``tests/server_crashes.py``), so that the rerun and the file's next tests have one."""
    report = yield
    server_crashes.record_deaths(item, report)
    return report


_FILE_CPU: cpu_seconds.FileCpu | None = None


def pytest_configure(config: pytest.Config) -> None:
    """Count CPU seconds per file (``tests/cpu_seconds.py``) in each process that runs tests:
    a pytest-xdist worker, or pytest without workers. Not in the controller of the workers, whose
    process tree holds them all (their tests' reports reach it interleaved)."""
    global _FILE_CPU
    worker = "PYTEST_XDIST_WORKER" in os.environ
    if not worker:
        cpu_seconds.clear()  # the last run's files; the workers start after this
    runs_tests = worker or not getattr(config.option, "numprocesses", None)
    if runs_tests and Path("/proc/self/stat").is_file():
        _FILE_CPU = cpu_seconds.FileCpu()


def pytest_runtest_logstart(nodeid: str, location: tuple[str, int | None, str]) -> None:
    """Charge the CPU seconds so far to the file that ran; this test's file runs from now
    (``tests/cpu_seconds.py``)."""
    if _FILE_CPU is not None:
        _FILE_CPU.switch(nodeid.split("::")[0])


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Each file's CPU seconds to ``build/test-cpu/<worker>.json``."""
    if _FILE_CPU is not None:
        _FILE_CPU.write(os.environ.get("PYTEST_XDIST_WORKER", "main"))


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """The tests rerun because their server died, with the first lines of each death."""
    lines = server_crashes.summary_lines(terminalreporter.stats.get("rerun", []))
    if lines:
        terminalreporter.section("tests rerun after their tritonserver died")
        for line in lines:
            terminalreporter.line(line)
