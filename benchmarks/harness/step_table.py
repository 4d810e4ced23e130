"""Where each request's time goes: per-step markdown tables from a perf_analyzer sweep.

Input is what :func:`benchmarks.harness.triton_side.sweep_steps` returns (a :class:`Sweep`) or its
levels. Per composing model and concurrency level, from the change in Triton's statistics extension
(``/v2/models/<m>/stats``) between a snapshot right before and right after perf_analyzer ran:

* **avg batch**: ``inference_count / execution_count`` (batch items per execution);
* **exec/s**: executions over the wall seconds between the two snapshots (perf_analyzer's
  start-up, warm-up and every window included, so slightly below the stable rate);
* **queue ms**, **compute ms**: Triton's ns sums divided by the request count, in ms; compute is
  compute_input + compute_infer + compute_output. Triton charges a batched execution's whole
  duration to every request in the batch, so these are latencies, not costs;
* **share of end-to-end**: (queue + compute) over perf_analyzer's mean latency of the whole
  request at that level (:func:`benchmarks.harness.perf_analyzer.mean_latency_ms`; ``c /
  throughput``
  by Little's law where it is missing). The rest is the ensemble's hand-offs, gRPC and the client.

A second table gives, per level, the load generator's own CPU use (cores = CPU seconds of the
perf_analyzer process / its wall seconds), its peak thread count, the cores it was pinned to
and the machine's usable cores.

Use (the lead's ``benchmarks/gpu/run.py``)::

    done = sweep_steps(server, spec.ENSEMBLE, data, levels, window, workdir, STEPS)
    lines += step_table.lines(done, title="Per step, 1 text/request")
    system.values |= step_table.client_values(done)   # {"client_cores_c64": 0.4, ...}
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from benchmarks.harness.perf_analyzer import cpu_list
from benchmarks.harness.triton_side import LevelSteps, StepStats, Sweep

STEP_HEADER = (
    "| model | c | avg batch | exec/s | queue ms | compute ms (input/infer/output) "
    "| share of end-to-end |"
)
CLIENT_HEADER = (
    "| c | req/s | mean ms | p99 ms | client cores | client CPU s / wall s | peak threads "
    "| pinned to | host cores |"
)
UNITS = (
    "Times are ms per request (Triton reports ns); a batched execution's duration counts for "
    "every request in it. exec/s spans the whole perf_analyzer run at that level."
)


def _levels(done: Sweep | Iterable[LevelSteps]) -> list[LevelSteps]:
    return list(done.levels if isinstance(done, Sweep) else done)


def end_to_end_ms(level: LevelSteps) -> float:
    """Mean latency of a whole request at ``level`` in ms: perf_analyzer's mean, or
    ``concurrency / throughput`` (Little's law) when that is missing; NaN when not measured."""
    if level.level is None:
        return math.nan
    if not math.isnan(level.level.avg_latency_ms):
        return level.level.avg_latency_ms
    m = level.level.measurement
    return 1e3 * m.concurrency / m.throughput if m.throughput > 0 else math.nan


def _num(value: float, digits: int) -> str:
    return "–" if math.isnan(value) else f"{value:.{digits}f}"


def step_row(model: str, level: LevelSteps) -> str:
    """One table row for ``model`` at ``level``.

    Raises:
        KeyError: ``model`` was not watched at that level.
    """
    step: StepStats = level.steps[model]
    ms = step.per_request_ms()
    compute = step.compute_ms()
    rate = step.executions / level.wall_s if level.wall_s > 0 else math.nan
    e2e = end_to_end_ms(level)
    share = (ms["queue"] + compute) / e2e if e2e > 0 else math.nan
    return (
        f"| {model} | {level.concurrency} | {step.average_batch:.1f} | {_num(rate, 1)} "
        f"| {ms['queue']:.3f} | {compute:.3f} ({ms['input']:.3f}/{ms['infer']:.3f}/"
        f"{ms['output']:.3f}) | {'–' if math.isnan(share) else f'{100 * share:.0f} %'} |"
    )


def step_table(done: Sweep | Iterable[LevelSteps]) -> list[str]:
    """Markdown lines: header, separator, one row per (model, level), grouped by model in the
    order the models were watched."""
    levels = _levels(done)
    models = list(dict.fromkeys(m for lv in levels for m in lv.steps))
    lines = [STEP_HEADER, "|" + "---|" * 7]
    for model in models:
        lines += [step_row(model, lv) for lv in levels if model in lv.steps]
    return lines


def client_table(done: Sweep | Iterable[LevelSteps]) -> list[str]:
    """Markdown lines: per level, throughput, mean and p99 latency, and perf_analyzer's own
    CPU use ('–' for a level that failed)."""
    lines = [CLIENT_HEADER, "|" + "---|" * 9]
    for lv in _levels(done):
        if lv.level is None:
            lines.append(f"| {lv.concurrency} | failed |" + " – |" * 7)
            continue
        m, c = lv.level.measurement, lv.level.client
        lines.append(
            f"| {lv.concurrency} | {m.throughput:.1f} | {_num(end_to_end_ms(lv), 2)} "
            f"| {m.p99_ms:.2f} | {c.cores:.2f} | {c.cpu_s:.1f} / {c.wall_s:.1f} "
            f"| {c.peak_threads} | {cpu_list(c.cpus) or 'not pinned'} | {c.host_cores} |"
        )
    return lines


def lines(done: Sweep | Iterable[LevelSteps], title: str = "") -> list[str]:
    """Both tables with the units note (and a ``### title`` heading when given), ending with
    a blank line; ready to join into a report."""
    levels = _levels(done)
    head = [f"### {title}", ""] if title else []
    mode = next((lv.level.client for lv in levels if lv.level), None)
    how = ""
    if mode is not None:
        how = (
            f" perf_analyzer ran with --async --max-threads {mode.client_threads}."
            if mode.client_threads
            else " perf_analyzer ran in synchronous mode (one thread per request in flight)."
        )
    return [
        *head,
        *step_table(levels),
        "",
        UNITS + how,
        "",
        *client_table(levels),
        "",
    ]


def client_values(done: Sweep | Iterable[LevelSteps]) -> dict[str, float]:
    """``{"client_cores_c<c>": cores, "client_threads_c<c>": peak threads}`` per measured level
    plus ``"host_cores"``: numbers for ``System.values`` (:mod:`benchmarks.harness.results`)."""
    out: dict[str, float] = {}
    for lv in _levels(done):
        if lv.level is not None:
            c = lv.level.client
            out[f"client_cores_c{lv.concurrency}"] = round(c.cores, 3)
            out[f"client_threads_c{lv.concurrency}"] = float(c.peak_threads)
            out["host_cores"] = float(c.host_cores)
    return out


def client_note(done: Sweep | Iterable[LevelSteps]) -> str:
    """One line for ``System.notes``, e.g. "perf_analyzer cores c1: 0.05, c64: 0.40 (of 16,
    pinned to 14-15, --async 4 threads)"; '' when no level was measured."""
    measured = [lv for lv in _levels(done) if lv.level is not None]
    if not measured:
        return ""
    c = measured[-1].level.client
    per = ", ".join(f"c{lv.concurrency}: {lv.level.client.cores:.2f}" for lv in measured)
    pinned = f"pinned to {cpu_list(c.cpus)}" if c.cpus else "not pinned"
    mode = f"--async {c.client_threads} threads" if c.client_threads else "sync"
    return f"perf_analyzer cores {per} (of {c.host_cores}, {pinned}, {mode})"


def write(done: Sweep, path, title: str) -> None:
    """:func:`lines` of ``done`` into the markdown file ``path`` (``benchmarks.gpu.run`` appends
    every ``steps-*.md`` of its output folder to its report)."""
    from pathlib import Path

    Path(path).write_text("\n".join(lines(done, title=title)) + "\n")
