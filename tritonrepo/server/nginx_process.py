"""nginx run as a child process of the launcher: what the HTTP guard
(:mod:`tritonrepo.server.http_guard`) and the gRPC guard (:mod:`tritonrepo.server.grpc_guard`)
share. A guard writes its config into its run directory and says when it is ready; this module
starts nginx in the foreground with that config, waits for it, and stops it.

Needs Debian's ``nginx`` (``make guard-deps``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import TypeVar

from tritonrepo.server.command import check_port_free
from tritonrepo.server.embedded_server import LaunchError, tied_to_parent

# How to install what the guards need: the Makefile's guard-deps target runs this apt-get (root).
INSTALL_HINT = (
    "install it with `make guard-deps` (as root: apt-get install nginx libnginx-mod-http-js)"
)

Self = TypeVar("Self", bound="NginxProcess")


def nginx_binary() -> Path | None:
    """The ``nginx`` executable (``$PATH``, then Debian's ``/usr/sbin/nginx``), or None."""
    found = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/usr/local/sbin")
    return Path(found) if found else None


def last_error(log: Path) -> str:
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


class NginxProcess:
    """One nginx listening on ``listen_host:listen_port`` in front of Triton's
    ``127.0.0.1:upstream_port``; use as a context manager or call start/stop. Subclasses say
    what is missing to run (:meth:`missing`), write the config (:meth:`write_config`) and say
    when nginx serves (:meth:`answers`).

    Args:
        listen_host: address nginx binds (``127.0.0.1``; ``0.0.0.0`` to expose it).
        listen_port: its TCP port.
        upstream_port: Triton's port on 127.0.0.1.
        run_dir: where the config, nginx.pid, error.log and refusals.log go; created if
            missing.
    """

    NAME = "guard"  # how messages name it, e.g. "HTTP guard"

    def __init__(
        self, listen_host: str, listen_port: int, upstream_port: int, run_dir: Path
    ) -> None:
        self.listen_host = listen_host
        self.listen_port = int(listen_port)
        self.upstream_port = int(upstream_port)
        self.run_dir = Path(run_dir)
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
        """nginx's error log (startup errors, and one line per refusal)."""
        return self.run_dir / "error.log"

    @property
    def refusals_log(self) -> Path:
        """Every 4xx/5xx answer: time, client, request line, status, size."""
        return self.run_dir / "refusals.log"

    def missing(self) -> str | None:
        """None when everything this nginx needs is installed; else why not, with the fix."""
        return None if nginx_binary() is not None else f"nginx is not installed: {INSTALL_HINT}"

    def write_config(self) -> Path:
        """Write nginx.conf (and what it includes) into ``run_dir``; return its path."""
        raise NotImplementedError

    def answers(self) -> bool:
        """Whether nginx serves on ``url`` now (one try, about a second at most)."""
        raise NotImplementedError

    def environment(self) -> dict[str, str] | None:
        """nginx's environment (None: the launcher's own)."""
        return None

    def command(self, conf: Path) -> list[str]:
        """The nginx command line (foreground, config and error log in the run directory).

        Raises:
            LaunchError: nginx is not installed.
        """
        binary = nginx_binary()
        if binary is None:
            raise LaunchError(self.missing() or "nginx is not installed")
        run_dir = str(self.run_dir.resolve())
        return [str(binary), "-p", run_dir, "-c", str(conf.resolve()),
                "-e", str(self.error_log.resolve()), "-g", "daemon off;"]  # fmt: skip

    def start(self: Self, timeout_s: float = 10.0) -> Self:
        """Write the config, start nginx and wait until it serves (``timeout_s``, seconds).

        Raises:
            LaunchError: something is missing, the port is taken, the config is refused, or
                nginx does not serve in time (one line, from nginx's log).
        """
        if self._process is not None:
            return self
        reason = self.missing()
        if reason:
            raise LaunchError(f"{self.NAME}: {reason}")
        check_port_free(self.listen_host, self.listen_port, self.NAME)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        conf = self.write_config()
        self.error_log.unlink(missing_ok=True)
        command, preexec_fn = tied_to_parent(self.command(conf))
        self._process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=self.environment(),
            start_new_session=True,  # a terminal's Ctrl-C reaches the launcher, which stops it
            preexec_fn=preexec_fn,
        )
        deadline = time.monotonic() + timeout_s
        while True:
            code = self._process.poll()
            if code is not None:
                self._process = None
                detail = last_error(self.error_log) or f"exit status {code}"
                raise LaunchError(f"{self.NAME} (nginx) did not start: {detail}")
            if self.answers():
                return self
            if time.monotonic() > deadline:
                detail = last_error(self.error_log)
                self.stop()
                raise LaunchError(
                    f"{self.NAME} did not answer on {self.url} within {timeout_s:.0f} s"
                    + (f": {detail}" if detail else "")
                )
            time.sleep(0.05)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop nginx: graceful (SIGQUIT: requests in flight finish) for ``timeout_s`` seconds,
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
        # The master leads its own session: SIGKILL its workers too, which would otherwise keep
        # the listening socket.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(5.0)

    def __enter__(self: Self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = ["INSTALL_HINT", "NginxProcess", "last_error", "nginx_binary"]
