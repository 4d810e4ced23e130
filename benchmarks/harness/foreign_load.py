"""The share of the machine's cores that other processes used while a benchmark ran."""

from __future__ import annotations

import os
import resource
import time


def _busy_and_own_s() -> tuple[float, float]:
    """(CPU seconds all processes used since boot, CPU seconds of this process and its
    descendants: the server and its stubs, from ``/proc``, and the children it has reaped, e.g.
    a finished ``wrk``, from ``getrusage``)."""
    tick = os.sysconf("SC_CLK_TCK")
    with open("/proc/stat") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    busy = sum(fields[:8]) - fields[3] - fields[4]  # all but idle and iowait
    parent: dict[int, int] = {}
    cpu: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                rest = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(entry)] = int(rest[1])
        cpu[int(entry)] = int(rest[11]) + int(rest[12])
    ours, frontier = {os.getpid()}, [os.getpid()]
    while frontier:
        pid = frontier.pop()
        kids = [c for c, p in parent.items() if p == pid and c not in ours]
        ours.update(kids)
        frontier += kids
    # Descendants that already exited (a wrk run) count through their rusage, not /proc.
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = sum(cpu.get(p, 0) for p in ours) / tick + reaped.ru_utime + reaped.ru_stime
    return busy / tick, own


class ForeignLoad:
    """The share of the machine's cores that processes other than this benchmark's used while
    the ``with`` block ran (other jobs on a shared machine skew every figure)."""

    def __enter__(self) -> ForeignLoad:
        self.start = (time.monotonic(), *_busy_and_own_s())
        return self

    def __exit__(self, *exc: object) -> None:
        wall, busy, own = (
            a - b for a, b in zip((time.monotonic(), *_busy_and_own_s()), self.start, strict=True)
        )
        cores = len(os.sched_getaffinity(0))
        self.share = max(0.0, busy - own) / (wall * cores) if wall > 0 else 0.0
