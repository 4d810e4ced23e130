"""Start and stop the embedded ``tritonserver`` 2.51.0 bundled in ``nvidia-pytriton==0.7.0``.

This is the one way this project starts a server: ``make serve``, the test fixtures and the
benchmarks all go through :class:`TritonServer`. It

* assembles a backend directory (the Python backend, the stub for the running Python, and the
  Python-based backends of ``backends/``),
* sets ``LD_LIBRARY_PATH`` (the wheel's ``nvidia_pytriton.libs`` and this Python's ``libpython``)
  and puts this interpreter's ``bin/`` first on ``PATH`` (the stub imports from that environment),
* runs the server in ``--model-control-mode=explicit`` with ``--model-config-name`` (``cpu`` by
  default), loads the requested models at start, binds HTTP/gRPC/metrics to 127.0.0.1 unless told
  otherwise, and streams the server log to a file (the command line and the checks before it:
  :mod:`tritonrepo.server.command`),
* restricts the model-repository API (index/load/unload) with a key when one is given
  (:mod:`tritonrepo.server.repository_key`),
* waits for readiness — every requested model READY and a real probe inference on each
  (:mod:`tritonrepo_client.control.health`), not Triton's server readiness, which runs with
  ``--strict-readiness=false`` (a strict server turns not-ready when any unrelated model fails
  to load) — and turns every known failure (port in use, missing artifact, model that fails to
  load or to serve, timeout) into a :class:`LaunchError` with a one-line message
  (:mod:`tritonrepo.server.readiness`),
* optionally supervises the server (``ServerOptions.heal_interval_s``): a thread that probes the
  models and reloads a step whose stub process died
  (:mod:`tritonrepo_client.control.healing.healer`), logging
  each restore on stderr,
* optionally restarts a server that died (``ServerOptions.restart_on_crash``:
  :mod:`tritonrepo.server.restart`), and puts HTTP behind the HTTP guard
  (``ServerOptions.http_guard``: :mod:`tritonrepo.server.http_guard`) and gRPC behind the gRPC
  guard (``ServerOptions.grpc_guard``: :mod:`tritonrepo.server.grpc_guard`, a size bound),
* stops it within a stated bound: SIGTERM, Triton's own ``--exit-timeout-secs``
  (``exit_timeout_s``), then SIGKILL after ``ServerOptions.stop_bound_s`` seconds.
"""

from __future__ import annotations

import contextlib
import secrets
import signal
import subprocess
import threading
import time
from pathlib import Path

from tritonrepo.paths import BUILD_DIR
from tritonrepo.server.command import check_port_free, free_port, preflight, tritonserver_command
from tritonrepo.server.embedded_server import (
    LaunchError,
    assemble_backend_directory,
    server_environment,
    tied_to_parent,
)
from tritonrepo.server.options import (
    GPU_CONFIG_SETS,
    GrpcServerTls,
    ServerOptions,
)
from tritonrepo.server.processes import (
    StubProcess,
    remove_shared_memory,
    shared_memory_regions,
    stub_processes,
)
from tritonrepo.server.readiness import exit_reason, one_line, ready_models, wait_ready
from tritonrepo.server.restart import CrashWatcher, ServerRestart, exit_cause, log, reap_stubs
from tritonrepo.server.supervisor import Supervisor

# Seconds stop() waits for the supervisor's pass in progress to end (and its HTTP connections
# to close) before the SIGTERM: after it, Triton 2.51 waits in 1 s steps for every open HTTP
# connection, idle keep-alive ones included (server src/http_server.cc, HTTPServer::Stop). A
# pass still running then (a reload) ends on its own, and stop() waits for it after the exit.
SUPERVISOR_CLOSE_S = 2.0

__all__ = [
    "GPU_CONFIG_SETS",
    "SUPERVISOR_CLOSE_S",
    "GrpcServerTls",
    "LaunchError",
    "ServerOptions",
    "ServerRestart",
    "StubProcess",
    "TritonServer",
    "check_port_free",
    "free_port",
    "one_line",
]


class TritonServer:
    """A running ``tritonserver`` process; use as a context manager or call start/stop.

    Example::

        with TritonServer(ServerOptions(http_port=free_port())) as server:
            print(server.options.http_url)

    Attributes:
        process: the current ``tritonserver`` process (a new one after each restart).
        restarts: :class:`ServerRestart` records, oldest first (``restart_on_crash``).
        failure: why the server is down for good after it died again and again (the crash
            loop bound of ``restart_on_crash``); None otherwise (see :meth:`down_reason`).
        heal_reports: what the supervisor did
        (``tritonrepo_client.control.healing.healer.StepReport``). guard: the HTTP guard in front of
        the HTTP endpoint (``http_guard``), else None. triton_http_port: the port tritonserver's own
        HTTP endpoint binds to: a private free
            port on 127.0.0.1 behind the guard, else ``options.http_port``.
        grpc_guard: the gRPC guard in front of the gRPC endpoint (``grpc_guard``), else None.
        triton_grpc_port: the port of tritonserver's own gRPC endpoint (a private free port on
            127.0.0.1 behind the gRPC guard, else ``options.grpc_port``).
    """

    def __init__(self, options: ServerOptions | None = None) -> None:
        self.options = options or ServerOptions()
        self.process: subprocess.Popen[bytes] | None = None
        self._log_handle = None
        self._log_offset = 0  # where the current process's part of the log starts
        self._supervisor: Supervisor | None = None
        self.heal_reports: list = []
        self.restarts: list[ServerRestart] = []
        self.failure: str | None = None
        self.guard = None
        self.triton_http_port = self.options.http_port
        self.grpc_guard = None
        self.triton_grpc_port = self.options.grpc_port
        self._backends: Path | None = None
        self._watcher: CrashWatcher | None = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        # This server's own prefix for the Python backend's shared-memory regions (every
        # Python-based backend takes it too), so stop() removes its regions and no other's.
        self.shm_prefix = f"tritonrepo_{secrets.token_hex(4)}_"

    @property
    def triton_http_url(self) -> str:
        """``host:port`` of tritonserver's own HTTP endpoint (the guard's upstream when the
        guard is on; else the same as ``options.http_url``)."""
        if self.options.http_guard:
            return f"127.0.0.1:{self.triton_http_port}"
        return self.options.http_url

    def command(self, backend_directory: Path) -> list[str]:
        """The full ``tritonserver`` command line (the same for every restart:
        :func:`tritonrepo.server.command.tritonserver_command`)."""
        return tritonserver_command(
            self.options,
            backend_directory,
            self.shm_prefix,
            self.triton_http_port,
            self.triton_grpc_port,
        )

    def environment(self) -> dict[str, str]:
        """Environment of the server: library path and the stubs' Python's ``bin/`` first
        (:func:`tritonrepo.server.embedded_server.server_environment`)."""
        return server_environment()

    def start(self) -> TritonServer:
        """Start the server (and the HTTP guard first when ``http_guard``), load
        ``options.models`` and wait until all of them are READY and answer a probe.

        Raises:
            LaunchError: port in use, missing repository or model, nginx missing for the
                guard, a model that fails to load (the message names the model and Triton's
                reason), the process exiting early, or readiness not reached within
                ``startup_timeout_s`` seconds.
        """
        preflight(self.options)
        self._stopping.clear()
        self.failure = None
        self._backends = assemble_backend_directory()
        log_file = Path(self.options.log_file)
        log_file.parent.mkdir(parents=True, exist_ok=True)
        self._log_handle = open(log_file, "wb")  # noqa: SIM115 - lives as long as the server
        try:
            if self.options.http_guard:
                self._start_guard()
            if self.options.grpc_guard:
                from tritonrepo.server.grpc_guard import start_for

                self.grpc_guard = start_for(self.options)
                self.triton_grpc_port = self.grpc_guard.upstream_port
            self._spawn()
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        if self.options.heal_interval_s:
            self.start_supervisor(self.options.heal_interval_s)
        if self.options.restart_on_crash:
            self._watcher = CrashWatcher(self)
            self._watcher.start()
        return self

    def _start_guard(self) -> None:
        """Start the HTTP guard on ``host:http_port`` in front of a private port.

        Raises:
            LaunchError: nginx or njs is missing (the message gives ``make guard-deps``, the
                apt command, and ``--no-http-guard``, the launcher's option to serve without it).
        """
        from tritonrepo.server.http_guard import HttpGuard, guard_available

        missing = guard_available()
        if missing:
            raise LaunchError(
                f"the HTTP guard cannot run: {missing}; or serve without it, on a loopback "
                "address only: tritonrepo-serve --no-http-guard"
            )
        o = self.options
        self.triton_http_port = free_port(avoid=o.given_ports)
        run_dir = BUILD_DIR / "http-guard" / str(o.http_port)
        self.guard = HttpGuard(
            o.host, o.http_port, self.triton_http_port, run_dir, repository_key=o.repository_key,
            metrics_port=o.metrics_port,
        ).start()  # fmt: skip

    def _spawn(self) -> None:
        """Start a ``tritonserver`` process with :meth:`command` (not while stopping)."""
        with self._lock:
            if self._stopping.is_set():
                raise LaunchError("the server is being stopped")
            assert self._log_handle is not None and self._backends is not None
            self._log_handle.flush()
            self._log_offset = self._log_handle.tell()
            command, preexec_fn = tied_to_parent(self.command(self._backends))
            self.process = subprocess.Popen(
                command,
                stdout=self._log_handle,
                stderr=subprocess.STDOUT,
                env=self.environment(),
                start_new_session=True,  # Ctrl-C reaches the launcher, which stops the server
                preexec_fn=preexec_fn,
            )

    def respawn(self) -> None:
        """Start the same command line again after the process died, and wait until ready
        (the restart watcher calls it; the guard, when there is one, stays up).

        Raises:
            LaunchError: see :meth:`start`.
        """
        self._spawn()
        self._wait_ready()

    def _wait_ready(self) -> None:
        """Wait until live, the start models READY and each answering its probe (through the
        guard when there is one: the path users take)."""
        wait_ready(self.triton_http_url, self.options, self._check_running, self.check_health)

    def _check_running(self) -> None:
        """Raise :class:`LaunchError` when the server is being stopped or its process exited."""
        if self._stopping.is_set():
            raise LaunchError("the server is being stopped")
        process = self.process
        if process is None or process.poll() is not None:
            code = process.returncode if process else None
            raise LaunchError(exit_reason(code, self.options.log_file, self._log_offset))

    def check_health(self, live_only: bool = False) -> list:
        """Liveness/readiness with a probe inference per loaded model (HTTP, at
        ``options.http_url``: through the guard when there is one).

        Returns:
            ``tritonrepo_client.control.health.Check`` list; all ``ok`` means healthy.
        """
        from tritonrepo_client.connection import TritonConnection
        from tritonrepo_client.control.health import check_health

        with TritonConnection(self.options.http_url, "http", timeout_s=30.0) as conn:
            return check_health(conn, self.options.models, live_only=live_only)

    def ready_models(self) -> list[str]:
        """Models with a READY version now (the repository index of tritonserver's own
        endpoint, read with the repository key).

        Raises:
            tritonclient.utils.InferenceServerException: the index cannot be read.
        """
        return ready_models(self.triton_http_url, self.options.repository_headers)

    def note_in_log(self, line: str) -> None:
        """Write a line of the launcher's own into the server log (between two processes)."""
        if self._log_handle is not None:
            with contextlib.suppress(OSError, ValueError):
                self._log_handle.write(f"--- {line}\n".encode())
                self._log_handle.flush()

    def down_reason(self) -> str | None:
        """Why the started server no longer serves and will not again: the crash loop bound
        reached, the HTTP guard exited, or (without ``restart_on_crash``) its process exited;
        None while it serves or a restart is under way."""
        if self.failure:
            return self.failure
        for name, g in (("HTTP", self.guard), ("gRPC", self.grpc_guard)):
            guard = g.process if g is not None else None
            if guard is not None and guard.poll() is not None:
                # The protocol answers nothing without its guard; no one restarts it: stop.
                return (
                    f"the {name} guard (nginx) exited with code {guard.returncode}; "
                    f"see {g.error_log}"
                )
        process = self.process
        if self.options.restart_on_crash or process is None or process.poll() is None:
            return None
        return (
            f"tritonserver exited unexpectedly: {exit_cause(process.returncode)}; "
            f"see {self.options.log_file}"
        )

    def process_log(self) -> str:
        """The current process's part of the server log (from its start; a respawned process's
        log follows the one before it in the same file); empty when there is none."""
        with contextlib.suppress(OSError), open(self.options.log_file, "rb") as log:
            log.seek(self._log_offset)
            return log.read().decode(errors="replace")
        return ""

    def kill_process(self) -> int | None:
        """SIGKILL the current process if it still runs; its exit code."""
        with self._lock:
            process = self.process
        if process is None:
            return None
        if process.poll() is None:
            process.kill()
            process.wait()
        return process.returncode

    # --- stop -----------------------------------------------------------------------------------
    def stop(self) -> int | None:
        """Stop the server within ``options.stop_bound_s`` seconds.

        SIGTERM first: Triton stops accepting connections and waits up to ``exit_timeout_s``
        seconds for the open ones (idle keep-alive ones too) and for its models to unload
        (server ``src/main.cc``, r24.10). Then the HTTP guard stops gracefully, which closes its
        connections to Triton once their requests are answered. Triton is killed if it still
        runs ``stop_bound_s`` seconds after the SIGTERM. The restart watcher is told to stop
        first (no restart can start once ``stop`` began), and the supervisor is stopped before
        the SIGTERM (up to ``SUPERVISOR_CLOSE_S`` seconds for a pass in progress), so that its
        keep-alive connections are closed before Triton counts the open ones.

        Returns the process exit code (``None`` if it was never started).
        """
        with self._lock:  # _spawn checks this flag under the same lock
            self._stopping.set()
            process = self.process
        if self._watcher is not None:
            self._watcher.signal_stop()
        if self._supervisor is not None:
            # Its keep-alive connections would be open HTTP connections Triton waits for.
            self._supervisor.stop(SUPERVISOR_CLOSE_S)
        deadline = time.monotonic() + self.options.stop_bound_s
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
        if self.guard is not None:
            self.guard.stop()
            self.guard = None
        if self.grpc_guard is not None:
            self.grpc_guard.stop()
            self.grpc_guard = None
        code = None
        if process is not None:
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log(
                    f"tritonserver did not exit within {self.options.stop_bound_s:g} s of "
                    "SIGTERM; killed"
                )
                process.kill()
                process.wait()
            code = process.returncode
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher = None
        self.stop_supervisor()
        self.process = None
        if process is not None:
            reap_stubs(self.stub_processes)
        if self._log_handle is not None:
            self._log_handle.close()
            self._log_handle = None
        self.remove_shared_memory()
        return code

    def start_supervisor(self, interval_s: float) -> None:
        """Start the thread that heals the served models every ``interval_s`` seconds (start()
        does when ``options.heal_interval_s`` is set); its reports go to ``heal_reports``
        (:class:`tritonrepo.server.supervisor.Supervisor`)."""
        self.stop_supervisor()
        self._supervisor = Supervisor(
            self.options, self.stub_processes, self.heal_reports, self.options.http_url
        )
        self._supervisor.start(interval_s)

    @property
    def served_snapshot(self) -> tuple[str, ...]:
        """The READY models at the restart watcher's last look at the repository index (what a
        restart loads again); the start list without ``restart_on_crash``."""
        if self._watcher is None:
            return tuple(self.options.models)
        return self._watcher.served

    @property
    def supervisor(self) -> Supervisor | None:
        """The self-healing supervisor, while it runs."""
        return self._supervisor

    def stop_supervisor(self, timeout_s: float = 10.0) -> None:
        """Stop the supervisor, waiting up to ``timeout_s`` seconds for a reload in progress."""
        if self._supervisor is not None:
            self._supervisor.stop(timeout_s)
            self._supervisor = None

    def stub_processes(self) -> list[StubProcess]:
        """The live Python-backend stub processes of this server, by instance name; [] when
        the server is not running."""
        return stub_processes(self.shm_prefix)

    def shared_memory_regions(self) -> list[Path]:
        """This server's Python-backend shared-memory regions in ``/dev/shm``."""
        return shared_memory_regions(self.shm_prefix)

    def remove_shared_memory(self) -> list[Path]:
        """Remove this server's regions (after it has exited); returns the paths removed."""
        return remove_shared_memory(self.shm_prefix)

    def __enter__(self) -> TritonServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
