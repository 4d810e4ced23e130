"""Start and stop the embedded ``tritonserver`` 2.51.0 bundled in ``nvidia-pytriton==0.7.0``.

This is the one way this project starts a server: ``make serve``, the test fixtures and the
benchmarks all go through :class:`TritonServer`. It

* assembles a backend directory (the Python backend, the stub for the running Python, and the
  Python-based backends of ``backends/``),
* sets ``LD_LIBRARY_PATH`` (the wheel's ``nvidia_pytriton.libs`` and this Python's ``libpython``)
  and puts this interpreter's ``bin/`` first on ``PATH`` (the stub imports from that environment),
* runs the server in ``--model-control-mode=explicit`` with ``--model-config-name`` (``cpu`` by
  default), loads the requested models at start, binds HTTP/gRPC/metrics to 127.0.0.1 unless told
  otherwise, and streams the server log to a file,
* restricts the model-repository API (index/load/unload) with a key when one is given
  (:mod:`tritonrepo.repository_key`),
* waits for readiness — every requested model READY and a real probe inference on each
  (:mod:`tritonrepo_client.health`), not Triton's server readiness, which runs with
  ``--strict-readiness=false`` (a strict server turns not-ready when any unrelated model fails
  to load) — and turns every known failure (port in use, missing artifact, model that fails to
  load or to serve, timeout) into a :class:`LaunchError` with a one-line message,
* optionally supervises the server (``ServerOptions.heal_interval_s``): a thread that probes the
  models and reloads a step whose stub process died (:mod:`tritonrepo_client.healing`), logging
  each restore on stderr.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import socket
import subprocess
import time
from pathlib import Path

from tritonrepo import preflight, repository_key
from tritonrepo.embedded_server import (
    LaunchError,
    assemble_backend_directory,
    library_path,
    stub_python,
    tritonserver_binary,
    visible_gpus,
)
from tritonrepo.server_options import (
    DEFAULT_MODELS,
    GPU_CONFIG_SETS,
    GrpcServerTls,
    ServerOptions,
)
from tritonrepo.server_processes import (
    StubProcess,
    remove_shared_memory,
    shared_memory_regions,
    stub_processes,
)
from tritonrepo.supervisor import Supervisor

__all__ = [
    "DEFAULT_MODELS",
    "GPU_CONFIG_SETS",
    "GrpcServerTls",
    "LaunchError",
    "ServerOptions",
    "StubProcess",
    "TritonServer",
    "check_port_free",
    "free_port",
    "one_line",
]


def check_port_free(host: str, port: int, what: str) -> None:
    """Raise :class:`LaunchError` if ``host:port`` cannot be bound (``what`` names the endpoint)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise LaunchError(
                f"{what} port {port} on {host} is already in use ({exc.strerror}); "
                f"stop the other process or choose another port"
            ) from None


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now (for tests and parallel servers)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def one_line(text: str, limit: int = 400) -> str:
    """Condense a Triton error (often a multi-line Python traceback) to one line.

    Keeps what precedes the stub's ``At:`` traceback marker, collapses whitespace, and cuts at
    ``limit`` characters.
    """
    text = text.split("\n\nAt:")[0].split("\nAt:\n")[0]
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _terminate_with_parent() -> None:
    """In the child before exec: SIGTERM it when the launcher dies, even by SIGKILL
    (Linux ``prctl(PR_SET_PDEATHSIG)``), so no server outlives its launcher or test run."""
    with contextlib.suppress(Exception):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


class TritonServer:
    """A running ``tritonserver`` process; use as a context manager or call start/stop.

    Example::

        with TritonServer(ServerOptions(http_port=free_port())) as server:
            print(server.options.http_url)
    """

    def __init__(self, options: ServerOptions | None = None) -> None:
        self.options = options or ServerOptions()
        self.process: subprocess.Popen[bytes] | None = None
        self._log_handle = None
        self._supervisor: Supervisor | None = None
        # What the supervisor did: tritonrepo_client.healing.StepReport, oldest first.
        self.heal_reports: list = []
        # This server's own prefix for the Python backend's shared-memory regions (every
        # Python-based backend takes it too), so stop() removes its regions and no other's.
        self.shm_prefix = f"tritonrepo_{secrets.token_hex(4)}_"

    def command(self, backend_directory: Path) -> list[str]:
        """The full ``tritonserver`` command line."""
        o = self.options
        cmd = [
            str(tritonserver_binary()),
            f"--model-repository={Path(o.model_repository).resolve()}",
            f"--backend-directory={backend_directory}",
            "--model-control-mode=explicit",
            f"--http-address={o.host}",
            f"--http-port={o.http_port}",
            f"--grpc-address={o.host}",
            f"--grpc-port={o.grpc_port}",
            "--allow-metrics=true",
            f"--metrics-address={o.host}",
            f"--metrics-port={o.metrics_port}",
            "--allow-gpu-metrics=false",
            # Latency quantiles per model (nv_inference_request_summary_us{quantile="0.99"} and
            # the queue/compute summaries), which the p99 alert and the dashboard read.
            "--metrics-config=summary_latencies=true",
            "--exit-on-error=false",
            # Readiness is judged per served model with a probe (tritonrepo_client.health): a
            # strict server turns not-ready when any unrelated model fails to load.
            "--strict-readiness=false",
            f"--log-verbose={o.log_verbose}",
            f"--backend-config=python,shm-region-prefix-name={self.shm_prefix}",
        ]
        if o.repository_key:
            restriction = repository_key.restriction(o.repository_key)
            cmd += [
                f"--http-restricted-api={restriction}",
                f"--grpc-restricted-protocol={restriction}",
            ]
        if o.grpc_tls:
            cmd += [
                "--grpc-use-ssl=true",
                f"--grpc-server-cert={Path(o.grpc_tls.cert).resolve()}",
                f"--grpc-server-key={Path(o.grpc_tls.key).resolve()}",
            ]
            if o.grpc_tls.client_ca:
                cmd += [
                    f"--grpc-root-cert={Path(o.grpc_tls.client_ca).resolve()}",
                    "--grpc-use-ssl-mutual=true",
                ]
        if o.model_config_name:
            cmd.append(f"--model-config-name={o.model_config_name}")
        pool = o.cuda_memory_pool_bytes
        if pool is None:
            pool = GPU_CONFIG_SETS.get(o.model_config_name or "")
        if pool:
            cmd += [f"--cuda-memory-pool-byte-size={gpu}:{pool}" for gpu in visible_gpus()]
        cmd += [f"--load-model={m}" for m in o.models]
        cmd += list(o.extra_args)
        return cmd

    def environment(self) -> dict[str, str]:
        """Environment of the server: library path and this interpreter's ``bin/`` first."""
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = library_path()
        env["PATH"] = os.pathsep.join([str(stub_python().parent), env.get("PATH", "")])
        env.setdefault("HF_HUB_OFFLINE", "1")
        return env

    def _preflight(self) -> None:
        o = self.options
        repo = Path(o.model_repository)
        if not repo.is_dir():
            raise LaunchError(f"model repository {repo} does not exist")
        for name in o.models:
            if not (repo / name).is_dir():
                raise LaunchError(f"model '{name}' is not in the model repository {repo}")
        errors = [
            f for f in preflight.run(repo, o.models, o.model_config_name) if f.level == "error"
        ]
        if errors:
            more = (
                f" (and {len(errors) - 1} more: python -m tritonrepo.preflight)"
                if errors[1:]
                else ""
            )
            raise LaunchError(f"preflight: model '{errors[0].model}': {errors[0].message}{more}")
        ports = [("HTTP", o.http_port), ("gRPC", o.grpc_port), ("metrics", o.metrics_port)]
        if o.heal_interval_s and o.heal_metrics_port is not None:
            ports.append(("self-healing metrics", o.heal_metrics_port))
        for what, port in ports:
            check_port_free(o.host, port, what)

    def start(self) -> TritonServer:
        """Start the server, load ``options.models`` and wait until all of them are READY.

        Raises:
            LaunchError: port in use, missing repository or model, a model that fails to load
                (the message names the model and Triton's reason), the process exiting early,
                or readiness not reached within ``startup_timeout_s`` seconds.
        """
        self._preflight()
        backends = assemble_backend_directory()
        log_file = Path(self.options.log_file)
        log_file.parent.mkdir(parents=True, exist_ok=True)
        self._log_handle = open(log_file, "wb")  # noqa: SIM115 - lives as long as the server
        self.process = subprocess.Popen(
            self.command(backends),
            stdout=self._log_handle,
            stderr=subprocess.STDOUT,
            env=self.environment(),
            start_new_session=True,  # Ctrl-C reaches the launcher, which stops the server
            preexec_fn=_terminate_with_parent,
        )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        if self.options.heal_interval_s:
            self.start_supervisor(self.options.heal_interval_s)
        return self

    def _wait_ready(self) -> None:
        import tritonclient.http as httpclient

        o = self.options
        deadline = time.monotonic() + o.startup_timeout_s
        client = httpclient.InferenceServerClient(o.http_url, connection_timeout=5.0)
        try:
            while True:
                if self.process is not None and self.process.poll() is not None:
                    raise LaunchError(self._exit_reason())
                with contextlib.suppress(Exception):
                    if client.is_server_live():
                        break
                if time.monotonic() > deadline:
                    raise LaunchError(
                        f"tritonserver was not live within {o.startup_timeout_s:.0f} s; "
                        f"see {o.log_file}"
                    )
                time.sleep(0.2)
            # Models listed with --load-model are loaded before the endpoints open, so the
            # repository index now holds their final state.
            failures = self._load_failures(
                client.get_model_repository_index(headers=o.repository_headers)
            )
            if failures:
                raise LaunchError(failures)
            self._wait_models_ready(client, deadline)
        finally:
            client.close()
        # The first failing model's own checks, not the "ready" summary naming them all.
        unhealthy = [c for c in self.check_health() if not c.ok and c.name != "ready"]
        if unhealthy:
            raise LaunchError(
                f"{unhealthy[0].name} failed: {one_line(unhealthy[0].detail)} (log: {o.log_file})"
            )

    def _wait_models_ready(self, client, deadline: float) -> None:
        """Poll until every requested model is READY (``time.monotonic()`` ``deadline``).

        Raises:
            LaunchError: not all READY by the deadline (the message names them).
        """
        o = self.options
        while True:
            waiting = [m for m in o.models if not client.is_model_ready(m)]
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise LaunchError(
                    f"{', '.join(waiting)} not READY within {o.startup_timeout_s:.0f} s; "
                    f"see {o.log_file}"
                )
            time.sleep(0.2)

    def check_health(self, live_only: bool = False) -> list:
        """Liveness/readiness with a probe inference per loaded model (HTTP).

        Returns:
            ``tritonrepo_client.health.Check`` list; all ``ok`` means healthy.
        """
        from tritonrepo_client.connection import TritonConnection
        from tritonrepo_client.health import check_health

        with TritonConnection(self.options.http_url, "http", timeout_s=30.0) as conn:
            return check_health(conn, self.options.models, live_only=live_only)

    def _load_failures(self, index: list[dict]) -> str:
        """One line naming the models that are not READY, composing models first."""
        states = {entry["name"]: entry for entry in index}
        failed = []
        for name in self.options.models:
            entry = states.get(name, {})
            if entry.get("state") != "READY":
                failed.append(name)
        if not failed:
            return ""
        # A failing step makes its ensemble fail too; name the step, whose reason is the cause.
        steps = [e for e in index if e.get("state") == "UNAVAILABLE" and e["name"] not in failed]
        culprit = steps[0] if steps else states.get(failed[0], {"name": failed[0]})
        reason = one_line(culprit.get("reason") or "unknown reason (see the server log)")
        return (
            f"model '{culprit['name']}' failed to load, so {', '.join(failed)} cannot serve: "
            f"{reason} (log: {self.options.log_file})"
        )

    def _exit_reason(self) -> str:
        code = self.process.returncode if self.process else None
        tail = ""
        with contextlib.suppress(OSError):
            lines = Path(self.options.log_file).read_text(errors="replace").splitlines()
            errors = [ln for ln in lines if ln.startswith("E") or "error" in ln.lower()]
            tail = one_line((errors or lines or [""])[-1], limit=300)
        return (
            f"tritonserver exited with code {code} during startup: {tail} "
            f"(log: {self.options.log_file})"
        )

    def stop(self) -> int | None:
        """Stop the server: SIGTERM, wait ``stop_timeout_s`` seconds, then SIGKILL.

        Returns the process exit code (``None`` if it was never started).
        """
        code = None
        self.stop_supervisor()
        if self.process is not None:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGTERM)
                try:
                    self.process.wait(timeout=self.options.stop_timeout_s)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
            code = self.process.returncode
            self.process = None
        if self._log_handle is not None:
            self._log_handle.close()
            self._log_handle = None
        self.remove_shared_memory()
        return code

    def start_supervisor(self, interval_s: float) -> None:
        """Start the thread that heals the served models every ``interval_s`` seconds (start()
        does when ``options.heal_interval_s`` is set); its reports go to ``heal_reports``
        (:class:`tritonrepo.supervisor.Supervisor`)."""
        self.stop_supervisor()
        self._supervisor = Supervisor(self.options, self.stub_processes, self.heal_reports)
        self._supervisor.start(interval_s)

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
