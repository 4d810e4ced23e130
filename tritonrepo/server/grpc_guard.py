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

import socket
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tritonrepo.paths import BUILD_DIR
from tritonrepo.server.command import free_port
from tritonrepo.server.http_guard_config import DEFAULT_MAX_BODY_BYTES, listen_address
from tritonrepo.server.nginx_process import INSTALL_HINT, NginxProcess, nginx_binary

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


class GrpcGuard(NginxProcess):
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

    NAME = "gRPC guard"

    def __init__(
        self,
        listen_host: str,
        listen_port: int,
        upstream_port: int,
        run_dir: Path,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        tls: GrpcGuardTls | None = None,
    ) -> None:
        super().__init__(listen_host, listen_port, upstream_port, run_dir)
        self.max_body_bytes = max_body_bytes
        self.tls = tls

    def missing(self) -> str | None:
        """None when nginx is installed (the njs module is not used); else why not, with both
        ways out."""
        if nginx_binary() is not None:
            return None
        return (
            f"nginx is not installed: {INSTALL_HINT}; or serve without it, on a loopback "
            "address only: tritonrepo-serve --no-grpc-guard"
        )

    def write_config(self) -> Path:
        """Render nginx.conf into ``run_dir`` (:func:`render`)."""
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
        return conf

    def answers(self) -> bool:
        """Whether nginx accepts a TCP connection on the guard's port."""
        try:
            with socket.create_connection((self.client_host, self.listen_port), timeout=1.0):
                return True
        except OSError:
            return False


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
    private = free_port(avoid=o.given_ports)
    guard = GrpcGuard(o.grpc_host, o.grpc_port, private, run_dir, o.grpc_max_request_bytes, tls)
    return guard.start()
