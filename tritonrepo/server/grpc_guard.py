"""A gRPC guard in front of Triton's gRPC endpoint: nginx's gRPC proxy (``grpc_pass``), run as a
child process, that bounds the size of what one gRPC call may send.

Triton 2.51 has no option for the largest gRPC message: it accepts up to 2 GB
(``MAX_GRPC_MESSAGE_SIZE = INT32_MAX`` in server ``src/grpc/grpc_server.cc``), holds the whole
message in the server's memory, copies it into the shared-memory region of each Python step it
passes through (a region grows to the largest request its stub carried and keeps that size), and
keeps the grown heap after the request (measured: four 649 MB requests took tritonserver's RSS
from 65 MB to 5 GB). The guard refuses a call whose request body exceeds ``max_body_bytes``
(default 64 MiB, the HTTP guard's limit) with gRPC status ``RESOURCE_EXHAUSTED`` and a message
naming the limit, and passes every other call unchanged. The limit counts every byte a call
sends, so a stream (``ModelStreamInfer``) carries at most ``max_body_bytes`` over its lifetime;
a client that streams more opens a new stream. While Triton is down (a restart) calls get
``UNAVAILABLE``.

nginx cannot look inside protobuf messages, so unlike the HTTP guard it does not refuse
classification requests of BYTES outputs (``class_count``), which end 2.51 over gRPC too.

Example::

    with GrpcGuard("127.0.0.1", 8001, upstream_port=18001, run_dir=Path("build/grpc-guard")):
        ...  # clients use 127.0.0.1:8001 as Triton's gRPC URL

Needs Debian's ``nginx`` (``make guard-deps``); the njs module is not used.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tritonrepo.paths import BUILD_DIR
from tritonrepo.server.command import check_port_free, free_port
from tritonrepo.server.embedded_server import LaunchError, terminate_with_parent
from tritonrepo.server.http_guard import INSTALL_HINT, _last_error, nginx_binary
from tritonrepo.server.http_guard_config import DEFAULT_MAX_BODY_BYTES, listen_address

if TYPE_CHECKING:
    from tritonrepo.server.options import ServerOptions

__all__ = ["DEFAULT_MAX_BODY_BYTES", "GrpcGuard", "GrpcGuardTls", "render", "start_for"]

# gRPC status codes (grpc/doc/statuscodes.md) the guard answers with itself.
RESOURCE_EXHAUSTED = 8
UNAVAILABLE = 14


@dataclass(frozen=True)
class GrpcGuardTls:
    """TLS ended at the guard: PEM files (client certificates required when ``client_ca``)."""

    cert: Path
    key: Path
    client_ca: Path | None = None


def render(
    listen: str,
    upstream: str,
    run_dir: Path,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    tls: GrpcGuardTls | None = None,
) -> str:
    """The nginx.conf text of a guard listening on ``listen`` (``host:port``) and forwarding to
    Triton's plaintext gRPC endpoint ``upstream`` (``host:port``); pid, logs and temporary files
    in ``run_dir``. Error answers follow nginx's documented pattern for gRPC errors (status 204
    with ``grpc-status`` and ``grpc-message`` headers)."""
    if max_body_bytes <= 0:
        raise ValueError(f"max_body_bytes must be a positive integer, not {max_body_bytes!r}")
    run = Path(run_dir).resolve()
    ssl = ""
    if tls is not None:
        ssl = (
            f"    ssl_certificate {Path(tls.cert).resolve()};\n"
            f"    ssl_certificate_key {Path(tls.key).resolve()};\n"
        )
        if tls.client_ca is not None:
            ssl += (
                f"    ssl_client_certificate {Path(tls.client_ca).resolve()};\n"
                "    ssl_verify_client on;\n"
            )
    too_large = (
        f"gRPC guard: request larger than {max_body_bytes} bytes (the limit per call; "
        "a stream counts everything it sends)"
    )
    return f"""# gRPC guard in front of Triton's gRPC endpoint (tritonrepo/server/grpc_guard.py).
worker_processes 1;
pid {run}/nginx.pid;
error_log {run}/error.log warn;

events {{
  worker_connections 1024;
}}

http {{
  client_body_temp_path {run}/temp/client_body;
  proxy_temp_path {run}/temp/proxy;
  fastcgi_temp_path {run}/temp/fastcgi;
  uwsgi_temp_path {run}/temp/uwsgi;
  scgi_temp_path {run}/temp/scgi;
  server_tokens off;
  log_format guard '$time_iso8601 $remote_addr "$request" $status $request_length '
                   '$request_time';
  map $status $guard_logged {{
    ~^[45] 1;
    default 0;
  }}
  access_log {run}/refusals.log guard if=$guard_logged;

  upstream triton_grpc {{
    server {upstream};
    keepalive 32;
    keepalive_timeout 60s;
  }}

  server {{
    listen {listen}{" ssl" if tls else ""} http2;
{ssl}    client_max_body_size {max_body_bytes};
    client_body_timeout 300s;
    grpc_read_timeout 300s;
    grpc_send_timeout 300s;
    grpc_socket_keepalive on;

    error_page 413 = @too_large;
    error_page 502 503 504 = @unavailable;

    location / {{
      grpc_pass grpc://triton_grpc;
    }}

    location @too_large {{
      default_type application/grpc;
      add_header grpc-status {RESOURCE_EXHAUSTED} always;
      add_header grpc-message "{too_large}" always;
      return 204;
    }}
    location @unavailable {{
      default_type application/grpc;
      add_header grpc-status {UNAVAILABLE} always;
      add_header grpc-message "gRPC guard: Triton did not answer (restarting or gone)" always;
      return 204;
    }}
  }}
}}
"""


class GrpcGuard:
    """nginx listening on ``listen_host:listen_port`` (HTTP/2), forwarding gRPC to Triton's
    plaintext gRPC port ``127.0.0.1:upstream_port``; use as a context manager or call
    start/stop.

    Args:
        listen_host: address the guard binds (``127.0.0.1``; ``0.0.0.0`` to expose it).
        listen_port: its TCP port.
        upstream_port: Triton's gRPC port on 127.0.0.1.
        run_dir: where nginx.conf, nginx.pid, error.log and refusals.log (every refused call)
            go; created if missing.
        max_body_bytes: most bytes one call may send (larger: ``RESOURCE_EXHAUSTED``).
        tls: end TLS at the guard (:class:`GrpcGuardTls`); None = plaintext.
    """

    def __init__(
        self,
        listen_host: str,
        listen_port: int,
        upstream_port: int,
        run_dir: Path,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        tls: GrpcGuardTls | None = None,
    ) -> None:
        self.listen_host = listen_host
        self.listen_port = int(listen_port)
        self.upstream_port = int(upstream_port)
        self.run_dir = Path(run_dir)
        self.max_body_bytes = max_body_bytes
        self.tls = tls
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def process(self) -> subprocess.Popen | None:
        """nginx's master process while started, else None."""
        return self._process

    @property
    def client_host(self) -> str:
        """Address a local client connects to (0.0.0.0 / :: are not connectable)."""
        return "127.0.0.1" if self.listen_host in ("0.0.0.0", "::", "") else self.listen_host

    @property
    def url(self) -> str:
        """``host:port`` of the guard, as tritonclient takes it."""
        return f"{self.client_host}:{self.listen_port}"

    @property
    def error_log(self) -> Path:
        """nginx's error log (startup errors, one line per refused oversized call)."""
        return self.run_dir / "error.log"

    @property
    def refusals_log(self) -> Path:
        """Every 4xx/5xx answer: time, client, request line, status, size."""
        return self.run_dir / "refusals.log"

    def start(self, timeout_s: float = 10.0) -> GrpcGuard:
        """Write the config, start nginx and wait until it accepts connections (``timeout_s``).

        Raises:
            LaunchError: nginx is missing, the port is taken, the config is refused, or the
                guard does not accept connections in time (one line, from nginx's log).
        """
        if self._process is not None:
            return self
        binary = nginx_binary()
        if binary is None:
            raise LaunchError(
                f"gRPC guard: nginx is not installed: {INSTALL_HINT}; or serve without it, on a "
                "loopback address only: tritonrepo-serve --no-grpc-guard"
            )
        check_port_free(self.listen_host, self.listen_port, "gRPC guard")
        (self.run_dir / "temp").mkdir(parents=True, exist_ok=True)
        conf = self.run_dir / "nginx.conf"
        conf.write_text(
            render(
                listen_address(self.listen_host, self.listen_port),
                listen_address("127.0.0.1", self.upstream_port),
                self.run_dir,
                self.max_body_bytes,
                self.tls,
            )
        )
        self.error_log.unlink(missing_ok=True)
        run_dir = str(self.run_dir.resolve())
        self._process = subprocess.Popen(
            [
                str(binary),
                "-p",
                run_dir,
                "-c",
                str(conf.resolve()),
                "-e",
                str(self.error_log.resolve()),
                "-g",
                "daemon off;",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=terminate_with_parent,
        )
        deadline = time.monotonic() + timeout_s
        while True:
            code = self._process.poll()
            if code is not None:
                self._process = None
                detail = _last_error(self.error_log) or f"exit status {code}"
                raise LaunchError(f"gRPC guard (nginx) did not start: {detail}")
            if self._accepts():
                return self
            if time.monotonic() > deadline:
                detail = _last_error(self.error_log)
                self.stop()
                raise LaunchError(
                    f"gRPC guard did not accept connections on {self.url} within "
                    f"{timeout_s:.0f} s" + (f": {detail}" if detail else "")
                )
            time.sleep(0.05)

    def _accepts(self) -> bool:
        try:
            with socket.create_connection((self.client_host, self.listen_port), timeout=1.0):
                return True
        except OSError:
            return False

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop nginx: graceful (SIGQUIT: calls in flight finish) for ``timeout_s`` seconds,
        then SIGTERM, then SIGKILL of its process group. Does nothing when not started."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        for sig, wait_s in ((signal.SIGQUIT, timeout_s), (signal.SIGTERM, 5.0)):
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(sig)
            try:
                process.wait(wait_s)
                return
            except subprocess.TimeoutExpired:
                continue
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(5.0)

    def __enter__(self) -> GrpcGuard:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def start_for(options: ServerOptions) -> GrpcGuard:
    """Start the gRPC guard of a launcher's server: on ``options.grpc_host:grpc_port``, in front
    of a free private port on 127.0.0.1 (``upstream_port``, where tritonserver's gRPC endpoint
    then binds), ending TLS when ``options.grpc_tls`` is set; run directory
    ``build/grpc-guard/<grpc_port>``.

    Raises:
        LaunchError: see :meth:`GrpcGuard.start`.
    """
    o = options
    tls = None
    if o.grpc_tls is not None:
        tls = GrpcGuardTls(o.grpc_tls.cert, o.grpc_tls.key, o.grpc_tls.client_ca)
    run_dir = BUILD_DIR / "grpc-guard" / str(o.grpc_port)
    guard = GrpcGuard(o.grpc_host, o.grpc_port, free_port(), run_dir, o.grpc_max_request_bytes, tls)
    return guard.start()
