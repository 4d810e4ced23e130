"""CPU seconds each test file costs: the test process and every process it started (servers,
their Python stubs, nginx, load generators), counted from ``/proc``.

On a 2-core machine the test run is bound by the cores, not by waiting (``vmstat``: idle ~6 %
of the pytest phase), so the wall time a file takes on one pytest-xdist worker says little
about what it costs the others; its CPU seconds do. At the start and end of each file the
process tree under the pytest process is read: each live process's ``utime + stime`` (its own)
plus ``cutime + cstime`` (its children's that it waited for), fields 14-17 of
``/proc/<pid>/stat`` (proc(5)), in clock ticks (``SC_CLK_TCK``). A process that left the tree
(re-parented to init) is counted up to the last reading that saw it, and the file running
when it left is charged less (never below zero).

Each worker writes ``{file: cpu seconds}`` to ``build/test-cpu/<worker>.json`` when it ends;
``python -m tests.durations`` prints the costliest files. Linux only; elsewhere nothing is
written.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

from tritonrepo.paths import BUILD_DIR

OUT_DIR = BUILD_DIR / "test-cpu"
TICK_S = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01


def _stat(pid: int) -> tuple[int, float] | None:
    """``(ppid, cpu seconds of the process and its waited-for children)``, or None when gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) "; comm may hold spaces
    ppid = int(fields[1])
    utime, stime, cutime, cstime = (int(x) for x in fields[11:15])
    return ppid, (utime + stime + cutime + cstime) * TICK_S


def tree_cpu(root: int) -> dict[int, float]:
    """CPU seconds of ``root`` and each live process under it, by pid."""
    stats = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None:
                stats[int(entry.name)] = stat
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            out[pid] = stats[pid][1]
            todo.extend(children.get(pid, ()))
    return out


class FileCpu:
    """Adds up the CPU seconds spent while each test file ran (:meth:`switch` at each test).

    The tree's total (every live process's own seconds plus its waited-for children's) only
    grows while processes start, run and are reaped inside the tree: a reaped child's seconds
    move into its parent's ``cutime``. A process that leaves the tree (re-parented to init)
    takes its seconds along: the file running then is charged less, never below zero."""

    def __init__(self) -> None:
        self.per_file: Counter[str] = Counter()
        self.current: str | None = None
        self.total = sum(tree_cpu(os.getpid()).values())

    def _advance(self) -> float:
        """CPU seconds since the last reading."""
        total = sum(tree_cpu(os.getpid()).values())
        spent, self.total = total - self.total, total
        return max(spent, 0.0)

    def switch(self, file: str) -> None:
        """Charge the seconds since the last switch to the file that was running; ``file``
        runs from now on."""
        if file == self.current:
            return
        spent = self._advance()
        if self.current is not None:
            self.per_file[self.current] += spent
        self.current = file

    def write(self, worker: str) -> Path | None:
        """Charge the running file and write ``{file: seconds}`` for ``worker``."""
        self.switch("")
        if not self.per_file:
            return None
        OUT_DIR.mkdir(parents=True, exist_ok=True)
        path = OUT_DIR / f"{worker}.json"
        ordered = {name: round(s, 1) for name, s in self.per_file.most_common() if name}
        path.write_text(json.dumps(ordered, indent=1) + "\n")
        return path


def clear(directory: Path = OUT_DIR) -> None:
    """Remove an earlier run's files."""
    for path in directory.glob("*.json") if directory.is_dir() else []:
        path.unlink(missing_ok=True)


def read_all(directory: Path = OUT_DIR) -> Counter[str]:
    """Every worker's ``{file: cpu seconds}`` under ``directory``, added up."""
    total: Counter[str] = Counter()
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        total.update(json.loads(path.read_text()))
    return total
