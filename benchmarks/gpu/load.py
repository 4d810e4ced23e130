"""The closed-loop load of ``make bench-gpu``'s CTR rows: ``wrk`` when the host has it, else
the Python load generator, driving the naive server and the served ensemble alike.

Interface: :class:`Target` (where the load goes) and :func:`timed_levels` (one measurement per
concurrency level, with Triton's step statistics around each when asked).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks.harness import loadgen, wrk
from benchmarks.harness.loadgen import Measurement


@dataclass(frozen=True)
class Target:
    """Where a system's load goes: ``POST http://127.0.0.1:<port><path>`` with the JSON body
    ``body(request)`` for each request."""

    port: int
    path: str
    body: Callable[[Any], dict]


def timed_levels(
    target: Target,
    requests: Sequence[Any],
    levels_wanted: Sequence[int],
    seconds: float,
    warmup_s: float,
    label: str,
    snapshot: Callable[[], dict] | None = None,
) -> tuple[list[Measurement], str, dict]:
    """The load generator at each of ``levels_wanted``, ``seconds`` measured after ``warmup_s``
    not counted: ``wrk`` (C, one thread per connection, :mod:`benchmarks.harness.wrk`) when it is
    installed, else the Python closed loop
    (:mod:`benchmarks.harness.loadgen`), whose one process sends at most about 2,500-3,100
    requests/s
    here (GIL): on the H200 every served configuration of ``ctr_ranking`` measured 2,350-2,850
    users/s at c=16 with it, while perf_analyzer reached 5,885 at c=64.

    Args:
        snapshot: optional ``() -> {model: StepStats}``, taken before and after each level.

    Returns:
        The measurements (``wrk`` reports no p95: NaN), a note naming the load generator (and,
        for the Python one, the CPU cores its process used per level: near 1.0, the GIL may be
        the limit), and per level the step statistics.
    """
    use_wrk = wrk.available()
    bodies = wrk.json_bodies(target.body(r) for r in requests)
    make = loadgen.http_json_caller(target.port, target.path, target.body)
    levels, cores, stats = [], [], {}
    for level in levels_wanted:
        before = snapshot() if snapshot else {}
        cpu, wall = time.process_time(), time.monotonic()
        if use_wrk:
            m = wrk.run(target.port, target.path, bodies, level, seconds, warmup_s)
        else:
            m = loadgen.run_closed_loop(make, requests, level, seconds, warmup_s)
        cores.append(f"c{level}: {(time.process_time() - cpu) / (time.monotonic() - wall):.2f}")
        if snapshot:
            stats[level] = {k: v.since(before[k]) for k, v in snapshot().items()}
        levels.append(m)
        print(f"{label} c={level}: {m.throughput:.0f} users/s, p99 {m.p99_ms:.1f} ms", flush=True)
    if use_wrk:
        return levels, "load generator wrk (C, one thread per connection)", stats
    return levels, "Python load generator, its CPU cores " + ", ".join(cores), stats
