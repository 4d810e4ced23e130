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
import contextlib
import http.client
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from tritonrepo.paths import BUILD_DIR
from tritonrepo.server.command import check_port_free
from tritonrepo.server.embedded_server import LaunchError, terminate_with_parent
from tritonrepo.server.http_guard_config import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_JSON_BYTES,
    NJS_MODULE,
    GuardSettings,
    listen_address,
    write_run_dir,
)

__all__ = ["DEFAULT_MAX_BODY_BYTES", "HttpGuard", "guard_available", "nginx_binary"]

# How to install what the guards need: the Makefile's guard-deps target runs this apt-get (root).
INSTALL_HINT = (
    "install it with `make guard-deps` (as root: apt-get install nginx libnginx-mod-http-js)"
)
HEALTH_PATH = "/_guard/healthz"  # answered by nginx itself (deploy/guard/nginx.conf.template)


def nginx_binary() -> Path | None:
    """The ``nginx`` executable (``$PATH``, then Debian's ``/usr/sbin/nginx``), or None."""
    found = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/usr/local/sbin")
    return Path(found) if found else None


def guard_available() -> str | None:
    """None when nginx and its njs module are installed; else why not, with the apt command."""
    if nginx_binary() is None:
        return f"nginx is not installed: {INSTALL_HINT}"
    if not NJS_MODULE.is_file():
        return f"nginx's njs module ({NJS_MODULE}) is not installed: {INSTALL_HINT}"
    return None


def _last_error(log: Path) -> str:
    """The last [emerg]/[alert]/[crit] line of nginx's error log, without its timestamp."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        for level in ("[emerg]", "[alert]", "[crit]"):
            if level in line:
                return line[line.index(level) :].strip()
    return lines[-1].strip() if lines else ""


class HttpGuard:
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
        workers: nginx worker processes (None = one per core).
        max_json_bytes: largest JSON text the guard parses (a JSON body, or the JSON header of
            a binary request), bytes (larger: 413); default 16 MiB.
    """

    def __init__(
        self,
        listen_host: str,
        listen_port: int,
        upstream_port: int,
        run_dir: Path,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        workers: int | None = None,
        max_json_bytes: int = DEFAULT_MAX_JSON_BYTES,
    ) -> None:
        self.listen_host = listen_host
        self.listen_port = int(listen_port)
        self.upstream_port = int(upstream_port)
        self.run_dir = Path(run_dir)
        self.settings = GuardSettings(
            listen=listen_address(listen_host, self.listen_port),
            upstream=listen_address("127.0.0.1", self.upstream_port),
            max_body_bytes=max_body_bytes,
            max_json_bytes=max_json_bytes,
            workers=str(workers) if workers else "auto",
        )
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
        """nginx's error log (startup errors, and one warning line per refusal)."""
        return self.run_dir / "error.log"

    @property
    def refusals_log(self) -> Path:
        """Every 4xx/5xx answer: time, client, request line, status, size, rule=<guard rule>."""
        return self.run_dir / "refusals.log"

    def command(self, conf: Path) -> list[str]:
        """The nginx command line (foreground, config and error log in the run directory)."""
        binary = nginx_binary()
        if binary is None:
            raise LaunchError(guard_available() or "nginx is not installed")
        run_dir = str(self.run_dir.resolve())
        return [str(binary), "-p", run_dir, "-c", str(conf.resolve()),
                "-e", str(self.error_log.resolve()), "-g", "daemon off;"]  # fmt: skip

    def start(self, timeout_s: float = 10.0) -> HttpGuard:
        """Render the config, start nginx and wait until the guard answers (``timeout_s``, s).

        Raises:
            LaunchError: nginx or its njs module is missing, the port is taken, the config is
                refused, or the guard does not answer in time (one line, from nginx's log).
        """
        if self._process is not None:
            return self
        reason = guard_available()
        if reason:
            raise LaunchError(f"HTTP guard: {reason}")
        check_port_free(self.listen_host, self.listen_port, "HTTP guard")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        conf = write_run_dir(self.settings, self.run_dir)
        self.error_log.unlink(missing_ok=True)
        self._process = subprocess.Popen(
            self.command(conf),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # a terminal's Ctrl-C reaches the launcher, which stops it
            preexec_fn=terminate_with_parent,
        )
        deadline = time.monotonic() + timeout_s
        while True:
            code = self._process.poll()
            if code is not None:
                self._process = None
                detail = _last_error(self.error_log) or f"exit status {code}"
                raise LaunchError(f"HTTP guard (nginx) did not start: {detail}")
            if self._answers():
                return self
            if time.monotonic() > deadline:
                detail = _last_error(self.error_log)
                self.stop()
                raise LaunchError(
                    f"HTTP guard did not answer on {self.url} within {timeout_s:.0f} s"
                    + (f": {detail}" if detail else "")
                )
            time.sleep(0.05)

    def _answers(self) -> bool:
        conn = http.client.HTTPConnection(self.client_host, self.listen_port, timeout=1.0)
        try:
            conn.request("GET", HEALTH_PATH)
            return conn.getresponse().status == 200
        except OSError:
            return False
        finally:
            conn.close()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop nginx: graceful (SIGQUIT: requests in flight finish) for ``timeout_s`` seconds,
        then SIGTERM, then SIGKILL. Does nothing when not started."""
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
        # The master leads its own session: SIGKILL its workers too, which would otherwise keep
        # the listening socket.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(5.0)

    def __enter__(self) -> HttpGuard:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


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
