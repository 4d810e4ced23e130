"""tests/cpu_seconds.py charges a file the CPU seconds of the processes it ran, once."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cpu_seconds import FileCpu

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="reads /proc")
BURN = "import time\nend = time.process_time() + 0.5\nwhile time.process_time() < end: pass"


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def test_a_child_is_charged_to_the_file_it_ran_in_and_once():
    """A child that ran and was reaped inside file "a", one that started in "b" and ended in
    "c": the kernel's own count of the children's seconds (getrusage) equals what the files
    were charged, to the tick."""
    before = children_cpu()
    files = FileCpu()
    files.switch("a")
    subprocess.run([sys.executable, "-c", BURN], check=True)
    files.switch("b")
    running = subprocess.Popen([sys.executable, "-c", BURN])
    time.sleep(0.2)
    files.switch("c")
    running.wait()
    files.switch("")
    spent = children_cpu() - before
    assert files.per_file["a"] >= 0.5
    assert files.per_file["b"] > 0 and files.per_file["c"] > 0
    charged = sum(files.per_file.values())
    # the test process's own seconds between the switches are charged too (a few ticks)
    assert spent - 0.02 <= charged <= spent + 0.2, (charged, spent)
