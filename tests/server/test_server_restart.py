"""A ``tritonserver`` that dies is restarted by the launcher (``restart_on_crash``): killed with
SIGKILL under load from retrying clients, ended by a real Triton 2.51 crash (SIGFPE), killed
again and again (the crash-loop bound), and the same through ``tritonrepo-serve`` with the HTTP
guard in front.

Throwaway servers only (each test crashes its own). Every request of the retrying clients must
end with the answer the same text got before the kill; every wait has a deadline in seconds.
Restart times are printed (``pytest -s``), not asserted beyond a generous deadline.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import (
    TEST_EXIT_TIMEOUT_S,
    free_ports,
    require_artifacts,
    require_guard,
    server_options,
    wait_for,
)
from tritonrepo.image import spec as image_spec
from tritonrepo.server.launcher import TritonServer
from tritonrepo.server.processes import metric_values
from tritonrepo.text import spec
from tritonrepo_client import EmbeddingClient, RepositoryClient, RetryPolicy

pytestmark = pytest.mark.server

TEXTS = ["A man is eating food.", "Restarts must lose nothing.", "Zürich", "short"]
SAME = 1 - 1e-5  # min cosine between an answer and the same text's answer before the kill
RESTART_DEADLINE_S = 120.0  # generous: two shared cores
REQUEST_DEADLINE_S = 30.0
# Retries that ride out a restart: measured restarts of a text_embedding server take 5 to 11 s
# from the kill to serving again on two cores (backoff 1 s included); 60 tries with full-jitter
# delays of up to 1 s wait about 28 s in all (the mean of 59 uniform delays: 0.05 + 0.1 + 0.2 +
# 0.4 + 55 x 0.5), and less than 15 s with a probability below 1e-9 (6 standard deviations).
RIDE_OUT = RetryPolicy(attempts=60, initial_backoff_s=0.1, max_backoff_s=1.0)


def restart_options(name: str, **overrides):
    """A throwaway text_embedding server that restarts when it dies, supervised (a pass every
    second) with its metrics on a free port."""
    values = {"models": (spec.ENSEMBLE,), "restart_on_crash": True, "heal_interval_s": 1.0}
    values.update(overrides)
    return server_options(name, heal_metrics=True, **values)


def embed_reference(url: str) -> dict[str, np.ndarray]:
    """Each text's embedding, FP32 [384], asked one by one."""
    with EmbeddingClient(url, timeout_s=REQUEST_DEADLINE_S) as client:
        return {text: client.embed([text])[0] for text in TEXTS}


@dataclass
class Load:
    """Threads of retrying ``EmbeddingClient`` s (HTTP and gRPC) embedding one text per request
    in a loop; each answer is compared with ``reference``. Outcomes: (sent, done, error)."""

    urls: dict[str, str]
    reference: dict[str, np.ndarray]
    protocols: tuple[str, ...] = ("http", "http", "grpc", "grpc")
    outcomes: list[tuple[float, float, str | None]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def worker(self, index: int, protocol: str) -> None:
        with EmbeddingClient(
            self.urls[protocol], protocol, timeout_s=REQUEST_DEADLINE_S, retry=RIDE_OUT
        ) as client:
            i = index
            while not self.stop.is_set():
                text = TEXTS[i % len(TEXTS)]
                i += 1
                sent, error = time.monotonic(), None
                try:
                    got = client.embed([text])[0]
                    if float(got @ self.reference[text]) < SAME:
                        error = f"wrong answer for {text!r}"
                except Exception as exc:  # recorded and judged by the test
                    error = f"{type(exc).__name__}: {exc}"
                with self.lock:
                    self.outcomes.append((sent, time.monotonic(), error))
                time.sleep(0.02)

    def __enter__(self) -> Load:
        self.threads = [
            threading.Thread(target=self.worker, args=(i, p), daemon=True)
            for i, p in enumerate(self.protocols)
        ]
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(RIDE_OUT.attempts * (RIDE_OUT.max_backoff_s + 1) + REQUEST_DEADLINE_S)
        assert not [t for t in self.threads if t.is_alive()], "a retrying client hung"

    def count(self) -> int:
        with self.lock:
            return len(self.outcomes)


def heal_metric(server: TritonServer, name: str) -> dict[str, float]:
    url = server.options.heal_metrics_url
    assert url is not None
    return metric_values(url, name, REQUEST_DEADLINE_S)


@pytest.mark.parametrize("guarded", [False, True], ids=["direct", "behind-the-guard"])
def test_a_killed_server_is_restarted_and_retrying_clients_lose_nothing(guarded):
    """SIGKILL under load from four retrying clients (HTTP straight to Triton or through the
    HTTP guard, which answers 503 while Triton is down; gRPC): one restart (SIGKILL), counted
    in the supervisor's metrics; every request answered correctly, some of them across the
    restart; the supervisor still heals afterwards (a stub killed after it is restored)."""
    require_artifacts()
    if guarded:
        require_guard()
    name = f"test_server_restart_kill{'_guarded' if guarded else ''}"
    with TritonServer(restart_options(name, http_guard=guarded)) as server:
        o = server.options
        reference = embed_reference(o.http_url)
        with Load({"http": o.http_url, "grpc": o.grpc_url}, reference) as load:
            wait_for("requests flowing", lambda: load.count() >= 20, REQUEST_DEADLINE_S)
            old_pid = server.process.pid
            killed = time.monotonic()
            os.kill(old_pid, signal.SIGKILL)
            wait_for("a restart", lambda: server.restarts, RESTART_DEADLINE_S)
            ready = time.monotonic()
            sent_before = load.count()
            wait_for("requests after the restart", lambda: load.count() >= sent_before + 20, 60)
        restart = server.restarts[0]
        assert len(server.restarts) == 1 and restart.ok, server.restarts
        assert (restart.signal, restart.exit_code) == ("SIGKILL", -signal.SIGKILL)
        assert server.process.pid != old_pid and server.process.poll() is None
        failed = [o for o in load.outcomes if o[2] is not None]
        assert not failed, f"{len(failed)} of {len(load.outcomes)} lost: {failed[:3]}"
        across = [o for o in load.outcomes if o[0] < ready and o[1] > killed]
        assert across, "no request was sent or answered during the restart"
        restarts = heal_metric(server, "tritonrepo_server_restarts_total")
        assert restarts['{signal="SIGKILL"}'] == 1, restarts
        assert sum(restarts.values()) == 1 and '{signal="SIGFPE"}' in restarts, restarts

        # The supervisor works on the restarted server: it watches the new stubs.
        passes = heal_metric(server, "tritonrepo_heal_passes_total")['{result="healthy"}']
        instance = f"{spec.TOKENIZE_MODEL}_0_0"
        stub = next(s for s in server.stub_processes() if s.instance == instance)
        seen = len(server.heal_reports)
        os.kill(stub.pid, signal.SIGKILL)
        wait_for(
            f"{spec.TOKENIZE_MODEL} restored",
            lambda: any(r.ok for r in server.heal_reports[seen:]),
            RESTART_DEADLINE_S,
        )
        after = heal_metric(server, "tritonrepo_heal_passes_total")['{result="healthy"}']
        assert after > passes
        assert heal_metric(server, "tritonrepo_model_ready")[f'{{model="{spec.ENSEMBLE}"}}'] == 1
    print(
        f"\nrestart after SIGKILL under load ({'guard' if guarded else 'direct'}): ready "
        f"{restart.ready_s:.1f} s after the kill "
        f"(backoff {restart.backoff_s:.1f} s); {len(load.outcomes)} requests, "
        f"{len(across)} across the restart, all correct"
    )


def classify_labels_with_class_count(url: str) -> None:
    """The ~200-byte request that ends Triton 2.51: classification (``class_count``) asked of
    the BYTES output LABELS (fixed after 24.10); sent straight to tritonserver."""
    import tritonclient.http as httpclient

    from tests.hostile_requests import probe_png

    client = httpclient.InferenceServerClient(url, network_timeout=REQUEST_DEADLINE_S)
    image = httpclient.InferInput("IMAGE", [1, 1], "BYTES")
    image.set_data_from_numpy(np.array([[probe_png()]], dtype=object))
    try:
        client.infer(
            image_spec.ENSEMBLE,
            [image],
            outputs=[httpclient.InferRequestedOutput("LABELS", class_count=3)],
        )
    except Exception:  # the connection ends with the server
        pass
    finally:
        client.close()


def test_a_sigfpe_crash_is_restarted_and_the_served_models_are_loaded_again(capsys):
    """A real crash: Triton 2.51 divides by zero on class_count of a BYTES output (SIGFPE),
    sent straight to tritonserver's own port (the guard refuses it). The launcher logs the
    signal, restarts the same command line, and loads text_embedding again, which was loaded
    after the start (not in the start list); the guard, where nginx is installed, stays up."""
    require_artifacts()
    from tritonrepo.server.http_guard import guard_available

    guarded = guard_available() is None  # behind the guard where nginx is installed (CI)
    options = restart_options(
        "test_server_restart_sigfpe",
        models=(image_spec.ENSEMBLE,),
        heal_interval_s=None,
        http_guard=guarded,
    )
    with TritonServer(options) as server:
        guard_pid = server.guard.process.pid if guarded else None
        with RepositoryClient(options.http_url, key=options.repository_key) as repo:
            repo.load(spec.ENSEMBLE)  # not in the start list
        wait_for("the snapshot", lambda: spec.ENSEMBLE in server.served_snapshot, 30)
        reference = embed_reference(options.http_url)
        command = server.process.args
        classify_labels_with_class_count(server.triton_http_url)
        wait_for("a restart", lambda: server.restarts, RESTART_DEADLINE_S)
        restart = server.restarts[0]
        assert restart.ok and restart.signal == "SIGFPE", server.restarts
        assert server.process.args == command  # the same command line, the same ports
        assert spec.ENSEMBLE in restart.reloaded, restart
        if guarded:  # the guard stayed up across the restart
            assert server.guard.process.pid == guard_pid and server.guard.process.poll() is None
        with EmbeddingClient(options.http_url, timeout_s=REQUEST_DEADLINE_S) as client:
            for text in TEXTS:
                assert float(client.embed([text])[0] @ reference[text]) >= SAME
        assert all(c.ok for c in server.check_health())
    err = capsys.readouterr().err
    assert "tritonserver died: SIGFPE (signal 8); restart 1 in 1.0 s" in err, err
    log = Path(options.log_file).read_text(errors="replace")
    assert "--- tritonserver died: SIGFPE (signal 8)" in log
    print(
        f"\nrestart after SIGFPE: ready {restart.ready_s:.1f} s after the crash, "
        f"{', '.join(restart.reloaded)} loaded again"
    )


def test_a_crash_loop_is_given_up_after_the_restart_limit(capsys):
    """restart_limit 1: the first kill is restarted, the second within the window is a crash
    loop: no further restart, ``down_reason`` says why, the process stays dead."""
    require_artifacts()
    options = restart_options(
        "test_server_restart_loop", heal_interval_s=None, restart_limit=1, restart_backoff_s=0.2
    )
    with TritonServer(options) as server:
        os.kill(server.process.pid, signal.SIGKILL)
        wait_for("a restart", lambda: server.restarts, RESTART_DEADLINE_S)
        assert server.down_reason() is None
        os.kill(server.process.pid, signal.SIGKILL)
        wait_for("giving up", lambda: server.down_reason() is not None, RESTART_DEADLINE_S)
        time.sleep(1.0)  # no restart comes after giving up
        assert len(server.restarts) == 1
        assert server.process.poll() == -signal.SIGKILL
        reason = server.down_reason()
        assert "SIGKILL (signal 9); not restarted: 1 restarts within 600 s" in reason, reason
        assert "crash loop" in reason
        assert not server.shared_memory_regions()
    err = capsys.readouterr().err
    assert err.count("tritonserver died: SIGKILL (signal 9)") == 2, err


# --- tritonrepo-serve ---------------------------------------------------------------------------
def serve_command(
    tmp_path: Path, *extra: str, exit_timeout_s: int = TEST_EXIT_TIMEOUT_S
) -> tuple[list[str], dict[str, int]]:
    """``tritonrepo-serve`` of text_embedding on free ports, supervised every second, with
    ``extra`` and Triton's exit timeout at ``exit_timeout_s`` (the test servers' 5 s, not its
    30 s default, unless a test checks the stop itself); and its ports."""
    ports = dict(zip(("http", "grpc", "metrics", "heal"), free_ports(4), strict=True))
    command = [
        sys.executable,
        "-m",
        "tritonrepo.server.serve",
        "--model",
        spec.ENSEMBLE,
        "--http-port",
        str(ports["http"]),
        "--grpc-port",
        str(ports["grpc"]),
        "--metrics-port",
        str(ports["metrics"]),
        "--heal-metrics-port",
        str(ports["heal"]),
        "--heal-interval",
        "1",
        "--log-file",
        str(tmp_path / "serve.log"),
        "--exit-timeout",
        str(exit_timeout_s),
        *extra,
    ]
    return command, ports


@dataclass
class Serve:
    """A ``tritonrepo-serve`` process; its stdout and stderr lines are collected by threads."""

    process: subprocess.Popen
    out: list[str] = field(default_factory=list)
    err: list[str] = field(default_factory=list)

    @classmethod
    def start(cls, command: list[str], key: str) -> Serve:
        env = {**os.environ, "TRITONREPO_REPOSITORY_KEY": key}
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        serve = cls(process)
        for stream, lines in ((process.stdout, serve.out), (process.stderr, serve.err)):
            threading.Thread(target=lambda s=stream, ls=lines: ls.extend(s), daemon=True).start()
        return serve

    def wait_line(self, lines: list[str], pattern: str, deadline_s: float) -> str:
        regex = re.compile(pattern)
        wait_for(
            f"{pattern!r} (out: {self.out}, err: {self.err})",
            lambda: any(regex.search(ln) for ln in list(lines)) or self.process.poll() is not None,
            deadline_s,
        )
        found = [ln for ln in list(lines) if regex.search(ln)]
        assert found, f"serve exited {self.process.returncode}: {self.out} {self.err}"
        return found[0]

    def tritonserver_pid(self) -> int:
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        pids = [int(p) for p in children.read_text().split()]
        named = [p for p in pids if Path(f"/proc/{p}/comm").read_text().strip() == "tritonserver"]
        assert len(named) == 1, pids
        return named[0]

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(60)


def test_serve_runs_the_guard_and_restarts_a_killed_server(tmp_path):
    """`tritonrepo-serve` by default: HTTP behind the guard, restart on crash; after a SIGKILL
    the guard (same port) answers again, the restart counter says SIGKILL; Ctrl-C stops it
    within the bound it states, exit 0, and tritonserver exits 0 too: on Triton's 30 s exit
    timeout (a clean stop takes ~4 s here), which a stop that waited it out would not."""
    require_artifacts()
    require_guard()
    command, ports = serve_command(tmp_path, exit_timeout_s=30)
    serve = Serve.start(command, "test-server-restart-key")
    try:
        serve.wait_line(serve.out, r"^ready: ", RESTART_DEADLINE_S)
        guard_line = serve.wait_line(serve.out, r"^HTTP is behind the HTTP guard", 1)
        assert f":{ports['http']}, forwarding to tritonserver on 127.0.0.1:" in guard_line
        url = f"127.0.0.1:{ports['http']}"
        reference = embed_reference(url)
        os.kill(serve.tritonserver_pid(), signal.SIGKILL)
        serve.wait_line(serve.err, r"^tritonserver died: SIGKILL \(signal 9\); restart 1 in", 30)
        serve.wait_line(serve.err, r"^tritonserver restart 1: ready", RESTART_DEADLINE_S)
        with EmbeddingClient(url, timeout_s=REQUEST_DEADLINE_S, retry=RIDE_OUT) as client:
            for text in TEXTS:
                assert float(client.embed([text])[0] @ reference[text]) >= SAME
        heal = f"http://127.0.0.1:{ports['heal']}/metrics"
        restarts = metric_values(heal, "tritonrepo_server_restarts_total")
        assert restarts['{signal="SIGKILL"}'] == 1, restarts

        def healthy_passes() -> float:
            return metric_values(heal, "tritonrepo_heal_passes_total")['{result="healthy"}']

        passes = healthy_passes()  # the supervisor goes on after the restart, through the guard
        wait_for("a healthy heal pass", lambda: healthy_passes() > passes, 30)
        serve.process.send_signal(signal.SIGINT)
        code = serve.process.wait(120)
        stopping = serve.wait_line(serve.out, r"^stopping tritonserver", 1)
        bound = float(re.search(r"killed after (\d+) s", stopping).group(1))
        stopped = serve.wait_line(serve.out, r"^tritonserver stopped in", 5)
        took = float(re.search(r"stopped in ([\d.]+) s", stopped).group(1))
        assert code == 0 and took <= bound, (code, serve.out, serve.err)
        assert stopped.rstrip().endswith("(exit code 0)"), serve.out
    finally:
        serve.kill()
    print(f"\nserve: restart through the guard, then stopped in {took:.1f} s (bound {bound:g} s)")


def test_serve_exits_1_when_the_restart_limit_is_reached(tmp_path):
    """--restart-limit 0: the first death is a crash loop already; serve exits 1 naming it."""
    require_artifacts()
    command, _ = serve_command(tmp_path, "--restart-limit", "0", "--no-http-guard")
    serve = Serve.start(command, "test-server-restart-key")
    try:
        serve.wait_line(serve.out, r"^ready: ", RESTART_DEADLINE_S)
        os.kill(serve.tritonserver_pid(), signal.SIGKILL)
        assert serve.process.wait(60) == 1
        line = serve.wait_line(serve.err, r"^error: ", 5)
        assert "SIGKILL (signal 9); not restarted: 0 restarts within 600 s reached the " in line
        assert "limit of 0 (a crash loop)" in line
    finally:
        serve.kill()


def test_exposing_http_without_the_guard_is_refused_without_insecure():
    out = subprocess.run(
        [sys.executable, "-m", "tritonrepo.server.serve", "--expose", "--no-http-guard"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 1
    assert out.stderr.startswith("error: refusing to serve on 0.0.0.0 with --no-http-guard")
    assert "add --insecure" in out.stderr and out.stderr.count("\n") == 1
