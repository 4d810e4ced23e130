"""How the launcher starts tritonserver, the guard's nginx and the tests' Prometheus
(``tritonrepo.server.embedded_server.tied_to_parent``): the child dies with its parent, and it
is started without a fork handler running in it (Python's vfork path), which is what keeps
gRPC's fork handler from aborting it before exec (grpc/grpc#43055)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import wait_for
from tritonrepo.paths import REPO_ROOT
from tritonrepo.server.embedded_server import terminate_with_parent, tied_to_parent

needs_setpriv = pytest.mark.skipif(
    shutil.which("setpriv") is None, reason="util-linux's setpriv is not on PATH"
)


def _python(code: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return b""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


@needs_setpriv
def test_the_child_gets_sigterm_when_its_parent_is_killed():
    """A parent that starts ``sleep 300`` this way and is then killed with SIGKILL (no cleanup
    of its own runs) takes the sleep with it within seconds."""
    parent = _python(
        """
        import subprocess, time
        from tritonrepo.server.embedded_server import tied_to_parent
        command, preexec_fn = tied_to_parent(["sleep", "300"])
        child = subprocess.Popen(command, preexec_fn=preexec_fn)
        print(child.pid, flush=True)
        time.sleep(300)
        """
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    try:
        # setpriv's own command line names sleep too: wait for the exec, after its prctl
        wait_for("sleep running", lambda: _cmdline(child).startswith(b"sleep"), 10)
        parent.kill()
        parent.wait(10)
        wait_for("the child's end after its parent was killed", lambda: not _alive(child), 10)
    finally:
        parent.kill()
        if _alive(child):
            os.kill(child, 9)


@needs_setpriv
@pytest.mark.parametrize("tied", [True, False], ids=["tied_to_parent", "preexec_fn"])
def test_no_fork_handler_runs_in_the_child(tmp_path, tied):
    """``os.register_at_fork`` handlers stand for gRPC's ``pthread_atfork`` ones: with
    :func:`tied_to_parent` none runs in the child (Python starts it with vfork); with a
    ``preexec_fn`` (the way it was started before) Python forks and runs them, so this test
    can fail."""
    marker = tmp_path / "handler-ran"
    parent = _python(
        f"""
        import os, subprocess
        from tritonrepo.server.embedded_server import terminate_with_parent, tied_to_parent
        os.register_at_fork(after_in_child=lambda: open({str(marker)!r}, "w").close())
        if {tied}:
            command, preexec_fn = tied_to_parent(["true"])
        else:
            command, preexec_fn = ["true"], terminate_with_parent
        subprocess.run(command, preexec_fn=preexec_fn, check=True, start_new_session=True)
        """
    )
    assert parent.wait(60) == 0
    assert marker.exists() is not tied


def test_without_setpriv_the_prctl_runs_before_exec(monkeypatch):
    """Where ``setpriv`` is missing the command is unchanged and the parent-death signal is set
    in the ``preexec_fn``."""
    monkeypatch.setattr(shutil, "which", lambda _name: None)
    assert tied_to_parent(["tritonserver", "--x"]) == (
        ["tritonserver", "--x"],
        terminate_with_parent,
    )


@needs_setpriv
def test_with_setpriv_the_command_runs_under_it():
    command, preexec_fn = tied_to_parent(["tritonserver", "--x"])
    assert preexec_fn is None
    assert Path(command[0]).name == "setpriv"
    assert command[1:] == ["--pdeathsig", "TERM", "--", "tritonserver", "--x"]
    out = subprocess.run([*command[:-2], "echo", "ran"], capture_output=True, text=True)
    assert (out.returncode, out.stdout) == (0, "ran\n"), out  # this setpriv takes the options
