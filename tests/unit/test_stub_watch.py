"""The supervisor's stub watch (``tritonrepo.server.supervisor.StubWatch``) on real processes.

A "stub" here is a real process whose command line is laid out as python_backend's
``stub_launcher.cc`` starts a stub (``triton_python_backend_stub <model file> <shm region>
... <instance name> <runtime>``): a link named ``triton_python_backend_stub`` to this Python,
running a script that sleeps. Its region is a real file in ``/dev/shm`` named with a prefix of
this test's own, so the watch lists these processes through ``/proc`` as it lists a server's
(:func:`tritonrepo.server.processes.stub_processes`) and no other server's stubs are seen.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tritonrepo.server.processes import SHM_DIRECTORY, region_exists, stub_processes
from tritonrepo.server.supervisor import StubWatch

SLEEPER = "import time\ntime.sleep(600)\n"


class Stubs:
    """Stub-like processes of one pretend server (regions named ``<prefix><instance>``)."""

    def __init__(self, folder: Path, prefix: str) -> None:
        self.prefix = prefix
        self.binary = folder / "triton_python_backend_stub"
        self.binary.symlink_to(os.path.realpath(sys.executable))
        self.model_file = folder / "model.py"
        self.model_file.write_text(SLEEPER)
        self.processes: dict[str, subprocess.Popen] = {}

    def region(self, instance: str) -> Path:
        return SHM_DIRECTORY / f"{self.prefix}{instance}"

    def start(self, instance: str) -> None:
        """A stub of ``instance`` with its region, listed by :func:`stub_processes` once its
        command line is readable."""
        self.region(instance).write_bytes(b"\0" * 64)
        args = [str(self.binary), str(self.model_file), f"{self.prefix}{instance}", "1048576",
                "1048576", str(os.getpid()), "/opt/tritonserver/backends/python", "1024",
                instance, "python"]  # fmt: skip
        self.processes[instance] = subprocess.Popen(args)
        deadline = time.monotonic() + 10.0
        while instance not in self.listed() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert instance in self.listed(), f"{instance} not listed: {self.listed()}"

    def kill(self, instance: str) -> None:
        """SIGKILL, as a crash or an OOM kill ends a stub: its region stays."""
        process = self.processes.pop(instance)
        process.send_signal(signal.SIGKILL)
        process.wait(30)

    def end_cleanly(self, instance: str) -> None:
        """As a stub ends on an unload: its region removed, then the process gone."""
        self.region(instance).unlink()
        process = self.processes.pop(instance)
        process.terminate()
        process.wait(30)

    def listed(self) -> list[str]:
        return [s.instance for s in stub_processes(self.prefix)]

    def close(self) -> None:
        for process in self.processes.values():
            process.kill()
            process.wait(30)
        for region in SHM_DIRECTORY.glob(f"{self.prefix}*"):
            region.unlink()


@pytest.fixture
def stubs(tmp_path: Path) -> Iterator[Stubs]:
    made = Stubs(tmp_path, f"tritonrepo_test_{secrets.token_hex(4)}_")
    try:
        yield made
    finally:
        made.close()


def test_a_killed_instance_stub_is_reported_once(stubs: Stubs) -> None:
    watch = StubWatch(lambda: stub_processes(stubs.prefix), confirm_s=0.05)
    for instance in ("toy_0_0", "toy_0_1", "other_0_0"):
        stubs.start(instance)
    assert watch() == []  # first seen
    stubs.kill("toy_0_1")
    assert stubs.region("toy_0_1").exists() and "toy_0_1" not in stubs.listed()
    assert watch() == ["toy_0_1"]
    assert watch() == []  # reported once, then forgotten
    stubs.kill("toy_0_0")
    stubs.kill("other_0_0")
    assert watch() == ["other_0_0", "toy_0_0"]


def test_a_stub_that_ends_cleanly_is_not_reported(stubs: Stubs) -> None:
    watch = StubWatch(lambda: stub_processes(stubs.prefix), confirm_s=0.05)
    stubs.start("toy_0_0")
    assert watch() == []
    stubs.end_cleanly("toy_0_0")
    assert watch() == []


def test_the_loading_stub_of_a_bare_model_name_is_never_reported(stubs: Stubs) -> None:
    """While Triton loads a Python model it runs a stub named after the model alone; it is no
    instance, and its end is never a death to heal."""
    watch = StubWatch(lambda: stub_processes(stubs.prefix), confirm_s=0.05)
    stubs.start("toy")
    assert watch() == []
    stubs.kill("toy")
    assert stubs.region("toy").exists()
    assert watch() == []


def test_a_stub_seen_only_after_the_first_call_is_watched_from_then_on(stubs: Stubs) -> None:
    """A reload brings an instance back under the same name: seen again, so a later kill is
    reported again."""
    watch = StubWatch(lambda: stub_processes(stubs.prefix), confirm_s=0.05)
    assert watch() == []
    stubs.start("toy_0_0")
    assert watch() == []
    stubs.kill("toy_0_0")
    assert watch() == ["toy_0_0"]
    stubs.region("toy_0_0").unlink()  # what Triton's reload leaves: a fresh region
    stubs.start("toy_0_0")
    assert watch() == []
    stubs.kill("toy_0_0")
    assert watch() == ["toy_0_0"]


def test_a_region_removed_between_the_two_looks_is_an_exit_not_a_kill(stubs: Stubs) -> None:
    """A stub that is leaving (its process gone, its region removed a moment later) is seen
    gone with its region at the first look and without it at the second: not reported."""
    looked: list[str] = []

    def region_left(region: str) -> bool:
        looked.append(region)
        left = region_exists(region)
        if len(looked) == 1:  # the stub finishes its exit right after the first look
            (SHM_DIRECTORY / region).unlink()
        return left

    watch = StubWatch(lambda: stub_processes(stubs.prefix), region_left, confirm_s=0.05)
    stubs.start("toy_0_0")
    assert watch() == []
    stubs.kill("toy_0_0")
    assert watch() == []
    assert looked == [f"{stubs.prefix}toy_0_0"] * 2


def test_another_servers_stubs_are_not_watched(stubs: Stubs, tmp_path: Path) -> None:
    other_folder = tmp_path / "other"
    other_folder.mkdir()
    other = Stubs(other_folder, f"tritonrepo_test_{secrets.token_hex(4)}_")
    try:
        watch = StubWatch(lambda: stub_processes(stubs.prefix), confirm_s=0.05)
        stubs.start("toy_0_0")
        other.start("elsewhere_0_0")
        assert watch() == []
        other.kill("elsewhere_0_0")
        assert watch() == []
        stubs.kill("toy_0_0")
        assert watch() == ["toy_0_0"]
    finally:
        other.close()
