"""Restart a ``tritonserver`` that died: the launcher's crash watcher.

Triton 2.51 can be ended by one small request (a classification request on a BYTES output
divides by zero: SIGFPE; a huge declared JSON shape: ``std::bad_alloc`` and SIGABRT), and a
process killed by the OOM killer is gone too. With ``ServerOptions.restart_on_crash`` the
launcher (:class:`tritonrepo.server.launcher.TritonServer`) runs a :class:`CrashWatcher` thread that

* notices the process exited while it was not being stopped, and logs one line on stderr
  naming the signal (``tritonserver died: SIGFPE (signal 8); restart 1 in 1.0 s``),
* waits an exponential backoff (``restart_backoff_s`` doubled per crash within
  ``restart_window_s``, capped at ``restart_max_backoff_s``), removes the dead process's
  Python-backend stubs and shared-memory regions, and starts the same command line on the
  same ports (the HTTP guard, when used, stays up: it forwards to the same private port),
* waits for readiness as at start (every start model READY, a probe inference each), then
  loads again the models that were served at the time of the crash but are not in the start
  list (a snapshot of the READY models of the repository index, read every
  ``SNAPSHOT_INTERVAL_S`` seconds with the repository key),
* gives up after ``restart_limit`` restarts within ``restart_window_s`` seconds (a crash loop):
  ``TritonServer.failure`` says why, and ``tritonrepo-serve`` exits 1 with that line.

Each restart is a :class:`ServerRestart` in ``TritonServer.restarts`` and counts in the
supervisor's ``tritonrepo_server_restarts_total{signal}``
(:mod:`tritonrepo_client.control.healing.metrics`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from tritonrepo.server.embedded_server import LaunchError
from tritonrepo.server.processes import StubProcess
from tritonrepo.server.supervisor import log

# Seconds between two reads of the repository index for the snapshot of served models.
SNAPSHOT_INTERVAL_S = 5.0
# Seconds the stubs of a dead server get to exit on their own before they are killed.
STUB_EXIT_S = 2.0


def exit_cause(code: int | None) -> str:
    """What ended a process with ``Popen.returncode`` ``code``: ``"SIGFPE (signal 8)"`` for a
    signal (a negative code), else ``"exit code N"``."""
    if code is not None and code < 0:
        return f"{signal_label(code)} (signal {-code})"
    return f"exit code {code}"


def signal_label(code: int | None) -> str:
    """The metric label of an exit: the signal's name (``SIGKILL``), or ``exit`` for an exit
    code."""
    if code is None or code >= 0:
        return "exit"
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


@dataclass(frozen=True)
class ServerRestart:
    """One restart of a dead ``tritonserver``.

    Attributes:
        number: 1 for the first restart of this server, then 2, ...
        died_at: ``time.time()`` when the death was noticed (seconds since the epoch).
        exit_code: ``Popen.returncode`` of the dead process (negative: the signal's number).
        signal: the signal's name (``SIGFPE``), or ``exit`` for an exit code.
        backoff_s: seconds waited before starting it again.
        ready_s: seconds from noticing the death to ready again (backoff, start, readiness
            probes and reloads included); None when this attempt failed.
        reloaded: models loaded again beyond the start list.
        error: why the attempt failed (empty when it succeeded).
    """

    number: int
    died_at: float
    exit_code: int | None
    signal: str
    backoff_s: float
    ready_s: float | None = None
    reloaded: tuple[str, ...] = ()
    error: str = ""

    @property
    def ok(self) -> bool:
        """Whether the server served again after this restart."""
        return self.ready_s is not None


@dataclass
class CrashLoop:
    """Restarts within a sliding window, and the backoff before the next one.

    Args:
        limit: restarts allowed within ``window_s`` seconds.
        window_s: the window, seconds.
        backoff_s: delay before the first restart of a window, seconds; doubled per restart
            already in the window (exponential backoff, as the gRPC connection-backoff spec
            and Kubernetes' CrashLoopBackOff do), capped at ``max_backoff_s``.
    """

    limit: int
    window_s: float
    backoff_s: float
    max_backoff_s: float
    times: list[float] = field(default_factory=list)

    def next_delay(self, now: float) -> float | None:
        """Record a crash at ``now`` (``time.monotonic()`` s); the seconds to wait before
        restarting, or None when ``limit`` restarts already happened within the window."""
        self.times = [t for t in self.times if now - t < self.window_s]
        if len(self.times) >= self.limit:
            return None
        delay = min(self.backoff_s * 2 ** len(self.times), self.max_backoff_s)
        self.times.append(now)
        return delay


class CrashWatcher:
    """The thread that restarts one :class:`tritonrepo.server.launcher.TritonServer` when it dies.

    Args:
        server: the server (its ``process``, ``options`` and restart hooks).
    """

    def __init__(self, server: Any) -> None:
        self.server = server
        o = server.options
        self.loop = CrashLoop(
            o.restart_limit, o.restart_window_s, o.restart_backoff_s, o.restart_max_backoff_s
        )
        self.served: tuple[str, ...] = tuple(o.models)  # READY models at the last snapshot
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start watching (a daemon thread)."""
        self._thread = threading.Thread(target=self._run, name="tritonrepo restart", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop watching; waits up to ``timeout_s`` seconds for the thread (a restart in
        progress ends at its next check: the server is being stopped)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
        self._thread = None

    def signal_stop(self) -> None:
        """Tell the thread to stop, without waiting (``TritonServer.stop`` does this first)."""
        self._stop.set()

    def _run(self) -> None:
        try:
            self._watch()
        except Exception as exc:  # say why nobody restarts the server any more, not vanish
            reason = f"tritonserver restart watcher failed: {type(exc).__name__}: {exc}"
            log(reason)
            self.server.failure = reason

    def _watch(self) -> None:
        next_snapshot = time.monotonic()
        while not self._stop.is_set():
            process = self.server.process
            if process is None:
                return
            try:
                code = process.wait(timeout=max(0.0, next_snapshot - time.monotonic()))
            except subprocess.TimeoutExpired:
                self._snapshot()
                next_snapshot = time.monotonic() + SNAPSHOT_INTERVAL_S
                continue
            if self._stop.is_set() or not self._recover(code):
                return
            next_snapshot = time.monotonic() + SNAPSHOT_INTERVAL_S

    def _snapshot(self) -> None:
        """Remember the models READY now (the repository index; kept when it cannot be read)."""
        with contextlib.suppress(Exception):
            self.served = tuple(self.server.ready_models())

    def _recover(self, code: int | None) -> bool:
        """Restart after the process exited with ``code``, until it serves (True) or the crash
        loop bound is reached or the server is being stopped (False)."""
        server = self.server
        while not self._stop.is_set():
            died = time.monotonic()
            died_at = time.time()
            delay = self.loop.next_delay(died)
            number = len(server.restarts) + 1
            if delay is None:
                o = server.options
                reason = (
                    f"tritonserver died: {exit_cause(code)}; not restarted: {len(self.loop.times)} "
                    f"restarts within {o.restart_window_s:g} s reached the limit of "
                    f"{o.restart_limit} (a crash loop); see {o.log_file}"
                )
                log(reason)
                self._after_death(code)
                server.failure = reason
                return False
            log(f"tritonserver died: {exit_cause(code)}; restart {number} in {delay:.1f} s")
            self._after_death(code)
            if self._stop.wait(delay):
                return False
            record = ServerRestart(number, died_at, code, signal_label(code), delay)
            try:
                server.respawn()
                reloaded = load_again(server, self.served)
            except Exception as exc:  # LaunchError, or the new process died mid-check
                if self._stop.is_set():
                    return False
                error = str(exc) if isinstance(exc, LaunchError) else f"{type(exc).__name__}: {exc}"
                server.restarts.append(replace(record, error=error))
                log(f"tritonserver restart {number} failed: {error}")
                code = server.kill_process()
                continue
            done = replace(record, ready_s=time.monotonic() - died, reloaded=reloaded)
            server.restarts.append(done)
            supervisor = server.supervisor
            if supervisor is not None:
                supervisor.server_restarted(done)
                supervisor.resume()
            again = f"; loaded again: {', '.join(reloaded)}" if reloaded else ""
            log(f"tritonserver restart {number}: ready {done.ready_s:.1f} s after it died{again}")
            return True
        return False

    def _after_death(self, code: int | None) -> None:
        """Pause the supervisor, note the exit in the server log, remove the dead process's
        stubs and shared-memory regions."""
        server = self.server
        if server.supervisor is not None:
            server.supervisor.pause()
        server.note_in_log(f"tritonserver died: {exit_cause(code)}")
        reap_stubs(server.stub_processes)
        server.remove_shared_memory()


def reap_stubs(list_stubs: Callable[[], list[StubProcess]]) -> list[int]:
    """Kill the stub processes ``list_stubs`` still finds after their tritonserver exited (a
    stub leaves by itself when it notices; it gets ``STUB_EXIT_S`` seconds for that).

    Returns:
        The pids killed.
    """
    deadline = time.monotonic() + STUB_EXIT_S
    while list_stubs() and time.monotonic() < deadline:
        time.sleep(0.1)
    killed = []
    for stub in list_stubs():
        with contextlib.suppress(ProcessLookupError):
            os.kill(stub.pid, signal.SIGKILL)
            killed.append(stub.pid)
    return killed


def load_again(server: Any, served: tuple[str, ...]) -> tuple[str, ...]:
    """Load each model of ``served`` that is not READY on ``server`` now (an ensemble brings its
    steps back with it); one that fails to load is logged and left out.

    Returns:
        The models loaded.
    """
    import tritonclient.http as httpclient

    loaded = []
    try:
        # Read once: each load of an ensemble brings its steps, never another served model.
        ready = set(server.ready_models())
    except Exception as exc:  # an index that cannot be read must not fail the restart
        log(f"tritonserver restart: repository index unreadable, loading all: {exc}")
        ready = set()
    for model in served:
        if model in ready:
            continue
        client = httpclient.InferenceServerClient(
            server.triton_http_url, connection_timeout=5.0, network_timeout=600.0
        )
        try:
            client.load_model(model, headers=server.options.repository_headers)
            loaded.append(model)
        except Exception as exc:  # one model that cannot load must not fail the restart
            log(f"tritonserver restart: could not load {model} again: {' '.join(str(exc).split())}")
        finally:
            client.close()
    return tuple(loaded)


__all__ = [
    "SNAPSHOT_INTERVAL_S",
    "CrashLoop",
    "CrashWatcher",
    "ServerRestart",
    "exit_cause",
    "load_again",
    "reap_stubs",
    "signal_label",
]
