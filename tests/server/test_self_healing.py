"""A dead Python step stays dead on Triton 2.51 (a stub killed as the OOM killer would,
SIGKILL, is not restarted and every request through it fails), so the launcher's supervisor and
``tritonrepo-client heal`` reload that step, and only it.

One server for the module, supervised (a pass every second) while every kind of stub is killed
under load, then without its supervisor for the CLI, for what must not be reloaded and for a
step that fails to reload (its repository is its own: tokenize is a copy a test may break).
The last test starts a server of its own, to stop it after a heal.
Time to recovery and failures before it are printed (``pytest -s``), not asserted beyond a
generous deadline.
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import client_cli, key_file, require_artifacts, server_options, wait_for
from tritonrepo.ctr import spec as ctr_spec
from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.server.launcher import TritonServer
from tritonrepo.text import spec
from tritonrepo_client import EmbeddingClient, RepositoryClient, TritonConnection
from tritonrepo_client.connection import ClientError
from tritonrepo_client.control.healing.healer import Healer
from tritonrepo_client.control.healing.traffic import Counts, inference_counts
from tritonrepo_client.control.health import probe_for

pytestmark = pytest.mark.server
RANKING, SESSION = ctr_spec.RANKING_ENSEMBLE, ctr_spec.SESSION_MODEL
# Stub kind -> the served models whose requests go through it.
KINDS = {
    spec.TOKENIZE_MODEL: (spec.ENSEMBLE,),
    spec.NORMALIZE_MODEL: (spec.ENSEMBLE,),
    spec.ENCODER_MODEL: (spec.ENSEMBLE,),
    ctr_spec.PREPROCESS_MODEL: (RANKING,),
    ctr_spec.POSTPROCESS_MODEL: (RANKING,),
    ctr_spec.CORE_MODEL: (RANKING, SESSION),
    SESSION: (SESSION,),
}
RECOVERY_DEADLINE_S = 45.0  # generous: two shared cores
AFTER_RECOVERY_REQUESTS = 20  # load kept up after a recovery, whose requests must all succeed


@dataclass
class Load:
    """Client threads sending probe requests (checked outputs) to each served model in a loop:
    per request (served model, start, end, error or None), seconds of time.monotonic()."""

    url: str
    models: tuple[str, ...]
    pause_s: float = 0.02
    results: list[tuple[str, float, float, str | None]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def __enter__(self) -> Load:
        for model in self.models:
            thread = threading.Thread(target=self._send, args=(model,), daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def _send(self, model: str) -> None:
        with TritonConnection(self.url, "http", timeout_s=30.0) as conn:
            while not self._stop.is_set():
                start, error = time.monotonic(), None
                try:
                    probe_for(conn, model)(conn, model)
                except ClientError as exc:
                    error = str(exc)
                self.results.append((model, start, time.monotonic(), error))
                time.sleep(self.pause_s)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)

    def window(self, models: tuple[str, ...], since: float, until: float) -> list:
        """Requests to ``models`` started in [since, until)."""
        return [r for r in list(self.results) if r[0] in models and since <= r[1] < until]


@pytest.fixture(scope="module")
def healing_server(tmp_path_factory) -> Iterator[TritonServer]:
    """All three served models, supervised (a pass every second), on a repository of its own:
    symlinks to the real models, but a copy of the tokenize step (a test breaks it)."""
    require_artifacts()
    repo = tmp_path_factory.mktemp("repository")
    for model in MODEL_REPOSITORY.iterdir():
        if model.name != spec.TOKENIZE_MODEL and (model / "config.pbtxt").is_file():
            (repo / model.name).symlink_to(model, target_is_directory=True)
    shutil.copytree(
        MODEL_REPOSITORY / spec.TOKENIZE_MODEL,
        repo / spec.TOKENIZE_MODEL,
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    options = server_options(
        "test_self_healing", model_repository=repo, heal_interval_s=1.0, heal_backoff_s=2.0
    )
    with TritonServer(options) as server:
        yield server


def stub_pid(server: TritonServer, instance: str) -> int | None:
    return next((s.pid for s in server.stub_processes() if s.instance == instance), None)


def kill_and_wait_for_restore(server: TritonServer, kind: str) -> tuple[float, object, int]:
    """SIGKILL ``kind``'s first stub; wait for the supervisor's "restored" report of ``kind``.

    Returns (kill time, the report, the instance's new pid)."""
    instance = f"{kind}_0_0"
    old_pid = stub_pid(server, instance)
    assert old_pid, f"no stub {instance}: {server.stub_processes()}"
    seen = len(server.heal_reports)
    killed_at = time.monotonic()
    os.kill(old_pid, signal.SIGKILL)
    while time.monotonic() - killed_at < RECOVERY_DEADLINE_S:
        restored = [r for r in server.heal_reports[seen:] if r.step == kind and r.ok]
        if restored:
            new_pid = stub_pid(server, instance)
            assert new_pid and new_pid != old_pid, f"{instance}: pid {old_pid} -> {new_pid}"
            return killed_at, restored[0], new_pid
        time.sleep(0.05)
    raise AssertionError(
        f"{kind} not restored within {RECOVERY_DEADLINE_S:.0f} s: {server.heal_reports[seen:]}"
    )


def test_a_dead_step_of_every_kind_is_restored_under_load(healing_server):
    """Kill one stub of each kind while clients keep sending: the supervisor reloads that step
    (a new pid for the instance), requests succeed again, none fails after the recovery."""
    rows = []
    with Load(healing_server.options.http_url, (spec.ENSEMBLE, RANKING, SESSION)) as load:
        wait_for(
            "an answer from every model",
            lambda: all(load.window((m,), 0.0, math.inf) for m in load.models),
            RECOVERY_DEADLINE_S,
        )
        for kind, served in KINDS.items():
            killed_at, report, _ = kill_and_wait_for_restore(healing_server, kind)
            recovered_at = time.monotonic()
            wait_for(
                f"{kind}: {AFTER_RECOVERY_REQUESTS} requests answered after the recovery",
                lambda s=served, t=recovered_at: (
                    len(load.window(s, t, math.inf)) >= AFTER_RECOVERY_REQUESTS
                ),
                RECOVERY_DEADLINE_S,
            )
            before = load.window(served, killed_at, recovered_at)
            after = load.window(served, recovered_at, time.monotonic())
            failed_after = [r for r in after if r[3] is not None]
            assert after, f"{kind}: no request to {served} after the recovery"
            assert not failed_after, f"{kind}: failed after recovery: {failed_after[:3]}"
            failures = sum(r[3] is not None for r in before)
            rows.append((kind, failures, len(before), recovered_at - killed_at, report))
    print("\nkind                     failed/sent before  kill->restored  detection->probe ok")
    for kind, failures, sent, seconds, report in rows:
        counts = f"{failures}/{sent}"
        print(f"{kind:<24} {counts:>18}  {seconds:12.1f} s  {report.recovery_s:17.1f} s")
    assert set(KINDS) <= {r.step for r in healing_server.heal_reports if r.ok}
    # Only the killed steps were reloaded: nothing else shows up in the supervisor's reports.
    assert {r.step for r in healing_server.heal_reports} <= set(KINDS)


# --- without a supervisor: the CLI, and what must not be reloaded ------------------------------


@pytest.fixture
def plain_server(healing_server) -> Iterator[TritonServer]:
    """The module's server with its supervisor stopped (restarted afterwards)."""
    healing_server.stop_supervisor()
    yield healing_server
    healing_server.start_supervisor(healing_server.options.heal_interval_s)


def cli(server: TritonServer, *args: str):
    key = key_file(server, server.options.log_file.parent)
    return client_cli(
        "--url", server.options.http_url, "--repository-key-file", str(key), *args, timeout=120
    )


def process_gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (no longer listed, or a zombie its parent has not
    reaped yet: /proc/PID/stat state Z or X)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def kill_stub(server: TritonServer, instance: str) -> int:
    pid = stub_pid(server, instance)
    assert pid, f"no stub {instance}"
    os.kill(pid, signal.SIGKILL)
    return pid


def test_cli_heal_restores_a_killed_stub(plain_server):
    """No supervisor: the stub stays dead (health fails, naming it), `heal` reloads the step
    (exit 0, a new pid), and a second `heal` has nothing to do but say the model serves."""
    instance = f"{spec.TOKENIZE_MODEL}_0_0"
    old_pid = kill_stub(plain_server, instance)
    wait_for(f"stub {old_pid} gone", lambda: process_gone(old_pid), RECOVERY_DEADLINE_S)
    health = cli(plain_server, "health", "--model", spec.ENSEMBLE)
    assert health.returncode == 1, health.stdout
    assert f"Stub process '{instance}' is not healthy" in health.stdout
    out = cli(plain_server, "heal", "--model", spec.ENSEMBLE)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith(f"restored {spec.TOKENIZE_MODEL} (for {spec.ENSEMBLE}) in ")
    assert f"ok   {spec.ENSEMBLE}" in out.stdout
    new_pid = stub_pid(plain_server, instance)
    assert new_pid and new_pid != old_pid
    again = cli(plain_server, "heal", "--model", spec.ENSEMBLE)
    assert again.returncode == 0 and again.stdout == f"ok   {spec.ENSEMBLE}\n", again.stdout
    assert cli(plain_server, "health", "--model", spec.ENSEMBLE).returncode == 0


def repo_client(server: TritonServer) -> RepositoryClient:
    return RepositoryClient(server.options.http_url, key=server.options.repository_key)


def test_a_failure_that_is_not_a_dead_step_is_not_reloaded(plain_server):
    """An unloaded step (an operator's doing) is reported, exit 1, and stays unloaded."""
    with repo_client(plain_server) as repo:
        repo.unload(spec.NORMALIZE_MODEL)
        repo.wait_until(spec.NORMALIZE_MODEL, [1], timeout_s=30)
        try:
            out = cli(plain_server, "heal", "--model", spec.ENSEMBLE)
            assert out.returncode == 1, out.stdout
            assert f"cannot heal {spec.ENSEMBLE} (not a dead step)" in out.stdout, out.stdout
            assert f"FAIL {spec.ENSEMBLE}" in out.stdout
            assert not repo.ready(spec.NORMALIZE_MODEL)
        finally:
            repo.load(spec.ENSEMBLE)
    assert cli(plain_server, "health", "--model", spec.ENSEMBLE).returncode == 0


def ensemble_counts(server: TritonServer) -> Counts:
    """The ensemble's request counts, from Triton's statistics."""
    with TritonConnection(server.options.http_url, "http") as conn:
        return inference_counts(conn)[spec.ENSEMBLE]


def test_traffic_vouches_for_a_model_and_idle_ones_are_probed_less(plain_server):
    """A pass probes a model only when its own requests do not vouch for it: after answered
    requests the ensemble is not probed (Triton counts no request of the pass); idle and
    recently probed beside a stub watch, it is not probed either; without a watch, idle, it
    is; after a step is unloaded, it is probed again and the failure found."""
    with repo_client(plain_server) as repo:
        watched = Healer(repo, (spec.ENSEMBLE,), only=True, dead_instances=lambda: [])
        first = watched.heal_once()
        assert first.by_traffic == () and first.healthy  # nothing to compare with: probed
        with EmbeddingClient(plain_server.options.http_url, "http") as client:
            client.embed(["traffic that vouches"] * 3)
        before = ensemble_counts(plain_server)
        second = watched.heal_once()
        assert second.by_traffic == (spec.ENSEMBLE,) and second.healthy
        assert ensemble_counts(plain_server) == before, "the pass sent a probe"
        third = watched.heal_once()  # idle, probed moments ago, the watch beside it
        assert third.by_traffic == (spec.ENSEMBLE,)
        assert ensemble_counts(plain_server) == before, "the idle pass sent a probe"

        unwatched = Healer(repo, (spec.ENSEMBLE,), only=True)
        unwatched.heal_once()
        idle = ensemble_counts(plain_server)
        report = unwatched.heal_once()
        assert report.by_traffic == () and report.healthy
        assert ensemble_counts(plain_server).success > idle.success, "idle and unwatched: probed"

        repo.unload(spec.NORMALIZE_MODEL)
        repo.wait_until(spec.NORMALIZE_MODEL, [1], timeout_s=30)
        try:
            after_unload = watched.heal_once()
            assert after_unload.by_traffic == ()
            assert spec.ENSEMBLE in after_unload.failing
        finally:
            repo.load(spec.ENSEMBLE)


BROKEN_STEP = """
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("this step cannot start (test_self_healing)")
"""


def test_a_step_that_fails_to_reload_backs_off_then_is_given_up(plain_server):
    """The killed step's model.py now fails to initialize: each reload fails and is reported,
    the next waits (backoff), and after max_attempts the step is reported, not reloaded."""
    model_py = Path(plain_server.options.model_repository) / spec.TOKENIZE_MODEL / "1" / "model.py"
    original = model_py.read_text()
    kill_stub(plain_server, f"{spec.TOKENIZE_MODEL}_0_0")
    model_py.write_text(BROKEN_STEP)
    try:
        with repo_client(plain_server) as repo:
            healer = Healer(repo, (spec.ENSEMBLE,), max_attempts=2, backoff_s=3.0)
            outcomes = []
            deadline = time.monotonic() + 30
            while "gave up" not in outcomes and time.monotonic() < deadline:
                report = healer.heal_once()
                assert not report.healthy
                outcomes += [s.outcome for s in report.steps if s.step == spec.TOKENIZE_MODEL]
                time.sleep(0.5)
        assert outcomes[0] == "failed" and "backing off" in outcomes, outcomes
        assert outcomes.count("failed") == 2 and outcomes[-1] == "gave up", outcomes
    finally:
        model_py.write_text(original)
    with repo_client(plain_server) as repo:
        report = Healer(repo, (spec.ENSEMBLE,)).heal_once()  # fixed: a new healer restores it
    assert report.healthy and [s.outcome for s in report.steps] == ["restored"], report


# --- stopping after a heal ---------------------------------------------------------------------

STOP_BOUND_S = 10.0  # generous (two shared cores); waiting out the exit timeout takes 30 s


def healthy_passes(server: TritonServer) -> float:
    """The supervisor's passes after which every served model served."""
    assert server.supervisor is not None
    registry = server.supervisor.metrics.registry
    return registry.get_sample_value("tritonrepo_heal_passes_total", {"result": "healthy"}) or 0.0


def test_a_server_that_healed_a_step_stops_cleanly_within_seconds():
    """A killed step restored by the supervisor leaves nothing Triton cannot unload: the
    server stops in seconds with exit code 0, on Triton's default 30 s exit timeout, which a
    model left loaded (or an open HTTP connection) would use up before exit code 1. The heal
    comes from the stub watch, with no request sent to the dead stub: on 2.51 each one leaves
    the model it reached held for good."""
    require_artifacts()
    options = server_options(
        "test_self_healing_stop", models=(spec.ENSEMBLE,), heal_interval_s=1.0, exit_timeout_s=30
    )
    server = TritonServer(options).start()
    try:
        wait_for("two supervisor passes", lambda: healthy_passes(server) >= 2, RECOVERY_DEADLINE_S)
        # Kill right after a pass: the next one's watch sees the stub gone before any probe (a
        # stub killed between the watch's look and the probes of the same pass meets a probe).
        passes = healthy_passes(server)
        wait_for("the end of a pass", lambda: healthy_passes(server) > passes, RECOVERY_DEADLINE_S)
        _, report, _ = kill_and_wait_for_restore(server, spec.TOKENIZE_MODEL)
        assert report.cause == f"the stub process of {spec.TOKENIZE_MODEL}_0_0 is gone", report
    finally:
        started = time.monotonic()
        code = server.stop()
        stop_s = time.monotonic() - started
    print(f"\nstop after a heal: {stop_s:.1f} s, exit code {code}")
    log = Path(options.log_file).read_text()
    assert "Exit timeout expired" not in log
    assert code == 0 and stop_s < STOP_BOUND_S, f"stop took {stop_s:.1f} s, exit code {code}"
