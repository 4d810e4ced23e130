"""An HTTP guard in front of Triton's HTTP endpoint: nginx with its njs module, run as a child
process.

Single small requests end the embedded Triton 2.51 process (a ``classification`` output of
datatype BYTES, a body of a million chunks, JSON nested 100,000 deep, a shape whose byte size
overflows, a gzip bomb; fixed in later Triton releases). The guard refuses those with 400/413/415
and Triton's error format (``{"error": "..."}``) and passes everything else unchanged, over
kept-alive upstream connections. Its rules and their sources: ``docs/operations/http_guard.md``;
the checks: ``deploy/guard/kserve_guard.js``; the config: ``deploy/guard/nginx.conf.template``
(:mod:`tritonrepo.server.http_guard_config`). It covers HTTP only, not gRPC.

Example::

    with HttpGuard("127.0.0.1", 8080, upstream_port=8000, run_dir=Path("build/guard")):
        ...  # clients use 127.0.0.1:8080 as Triton's HTTP URL

Needs Debian's ``nginx`` and ``libnginx-mod-http-js`` (``make guard-deps``); runs as any user
(as root the workers run as nginx's default user, nobody).
"""

from __future__ import annotations

import argparse
import http.client
import os
import time
from pathlib import Path

from tritonrepo.paths import BUILD_DIR
from tritonrepo.server.embedded_server import LaunchError
from tritonrepo.server.http_guard_config import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_JSON_BYTES,
    DEFAULT_MAX_UPLOAD_BYTES,
    NJS_MODULE,
    GuardSettings,
    listen_address,
    write_run_dir,
)
from tritonrepo.server.nginx_process import INSTALL_HINT, NginxProcess, nginx_binary
from tritonrepo.server.repository_key import ENV_KEY, ENV_KEY_FILE

__all__ = ["DEFAULT_MAX_BODY_BYTES", "HttpGuard", "guard_available", "nginx_binary"]

HEALTH_PATH = "/_guard/healthz"  # answered by nginx itself (deploy/guard/nginx.conf.template)


def guard_available() -> str | None:
    """None when nginx and its njs module are installed; else why not, with the apt command."""
    if nginx_binary() is None:
        return f"nginx is not installed: {INSTALL_HINT}"
    if not NJS_MODULE.is_file():
        return f"nginx's njs module ({NJS_MODULE}) is not installed: {INSTALL_HINT}"
    return None


def default_workers() -> int:
    """nginx worker processes for a guard next to tritonserver on this machine: half the cores
    this process may use, at least one. The guard shares the cores with Triton and its stubs; on
    2 cores with one worker instead of one per core, ``click_lightgbm``'s one-step model answered
    6,120 instead of 5,394 requests/s through the guard at concurrency 16, p99 7.6 instead of
    13.7 ms (``wrk``, 8 s each)."""
    return max(1, len(os.sched_getaffinity(0)) // 2)


class HttpGuard(NginxProcess):
    """nginx + njs listening on ``listen_host:listen_port``, forwarding to Triton's HTTP port
    ``127.0.0.1:upstream_port``; use as a context manager or call start/stop.

    Args:
        listen_host: address the guard binds (``127.0.0.1``; ``0.0.0.0`` to expose it).
        listen_port: its TCP port.
        upstream_port: Triton's HTTP port on 127.0.0.1.
        run_dir: where the rendered nginx.conf, the njs script, nginx.pid, error.log (nginx's
            messages and each refusal) and refusals.log (every 4xx/5xx answer with the guard
            rule that refused it) go; created if missing.
        max_body_bytes: largest request body, bytes (larger: 413); default 64 MiB.
        workers: nginx worker processes (None = :func:`default_workers`, half the cores).
        max_json_bytes: largest JSON text the guard parses (a JSON body, or the JSON header of
            a binary request), bytes (larger: 413); default 16 MiB.
        repository_key: the key Triton's admin APIs are locked with (None: unrestricted); a
            repository load request carrying it may be up to ``max_upload_bytes``.
        max_upload_bytes: largest repository load request carrying the key (a rollout's
            upload mode), bytes (larger: 413); default 2 GiB.
        metrics_port: Triton's metrics port on this host, which the guard tells its clients
            (``GET /_guard/upstream``); None: it cannot tell.
    """

    NAME = "HTTP guard"

    def __init__(
        self,
        listen_host: str,
        listen_port: int,
        upstream_port: int,
        run_dir: Path,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        workers: int | None = None,
        max_json_bytes: int = DEFAULT_MAX_JSON_BYTES,
        repository_key: str | None = None,
        max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES,
        metrics_port: int | None = None,
    ) -> None:
        super().__init__(listen_host, listen_port, upstream_port, run_dir)
        self.repository_key = repository_key
        self.settings = GuardSettings(
            listen=listen_address(listen_host, self.listen_port),
            upstream=listen_address("127.0.0.1", self.upstream_port),
            max_body_bytes=max_body_bytes,
            max_json_bytes=max_json_bytes,
            max_upload_bytes=max_upload_bytes,
            workers=str(workers or default_workers()),
            metrics_port=metrics_port,
        )

    def missing(self) -> str | None:
        """:func:`guard_available`: nginx and its njs module."""
        return guard_available()

    def environment(self) -> dict[str, str]:
        """The launcher's environment with ``TRITONREPO_REPOSITORY_KEY`` set to the server's
        key (kserve_guard.js reads it; nginx passes only the variables its config names), or,
        for a server without a key, with neither key variable (the guard's admin APIs are open
        like Triton's)."""
        env = {k: v for k, v in os.environ.items() if k not in (ENV_KEY, ENV_KEY_FILE)}
        return {**env, ENV_KEY: self.repository_key} if self.repository_key else env

    def write_config(self) -> Path:
        """Render nginx.conf and copy the njs script into ``run_dir``."""
        return write_run_dir(self.settings, self.run_dir)

    def answers(self) -> bool:
        """Whether nginx answers its own health path with 200."""
        conn = http.client.HTTPConnection(self.client_host, self.listen_port, timeout=1.0)
        try:
            conn.request("GET", HEALTH_PATH)
            return conn.getresponse().status == 200
        except OSError:
            return False
        finally:
            conn.close()


def main(argv: list[str] | None = None) -> int:
    """Run the guard in the foreground until Ctrl-C."""
    parser = argparse.ArgumentParser(
        prog="python -m tritonrepo.server.http_guard", description=main.__doc__
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8080, help="guard port (default 8080)")
    parser.add_argument(
        "--upstream-port", type=int, default=8000, help="Triton's HTTP port on 127.0.0.1"
    )
    parser.add_argument("--run-dir", type=Path, default=BUILD_DIR / "guard", help="config and logs")
    parser.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES)
    args = parser.parse_args(argv)
    guard = HttpGuard(args.host, args.port, args.upstream_port, args.run_dir, args.max_body_bytes)
    try:
        guard.start()
    except LaunchError as exc:
        print(f"error: {exc}")
        return 1
    print(f"HTTP guard on {guard.url} -> 127.0.0.1:{args.upstream_port} (logs: {args.run_dir})")
    try:
        while guard.process is not None and guard.process.poll() is None:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        guard.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
