"""The ``ctr_ranking`` summary lines of ``make bench-gpu`` (:func:`summary`), from the systems
:func:`benchmarks.gpu.ctr.run_section` measured: served vs the naive FastAPI server at c=16,
served peak vs in-process PyTorch at its best batch, and the Python steps' time per request."""

from __future__ import annotations

from benchmarks.gpu.ctr_checks import STEPS
from benchmarks.harness.loadgen import Measurement
from benchmarks.harness.results import IN_PROCESS, System
from tritonrepo.ctr import spec

GOAL_VS_NAIVE = 5.0  # bound of the ratio served at c=16 / the naive server at c=16
GOAL_VS_IN_PROCESS = 1.0  # bound of the ratio served peak / in-process at its best batch


def _measured(level: Measurement | None) -> bool:
    return level is not None and level.throughput > 0  # 0: nothing answered in the window


def _verdict(ratio: float, goal: float) -> str:
    return "met" if ratio >= goal else f"missed by {100 * (1 - ratio / goal):.0f} %"


def summary(systems: list[System]) -> list[str]:
    """Markdown lines: served vs naive at c=16 (ratio checked against ≥ 5×, and p99), served peak
    vs the best in-process batch of the served precision (against ≥ 1.0×), and the steps' time
    per request."""
    find = {s.key: s for s in systems}
    served_s = find.get("triton_python_load")
    naives = [s for s in systems if s.key.startswith("naive_") and _measured(s.at(16))]
    local = [s for s in systems if s.load == IN_PROCESS and s.levels]
    lines = ["## ctr_ranking (torch_gpu)", ""]
    if not served_s or not _measured(served_s.at(16)) or not naives or not local:
        return [
            *lines,
            "Not evaluated: a system has no answered request at c=16 (see the log).",
            "",
        ]
    s16 = served_s.at(16)
    best_naive = max(naives, key=lambda s: s.at(16).throughput)
    for n in naives:
        ratio = s16.throughput / n.at(16).throughput
        lower = "lower" if s16.p99_ms < n.at(16).p99_ms else "**not lower**"
        goal = (
            f"goal ≥ {GOAL_VS_NAIVE:g}×: {_verdict(ratio, GOAL_VS_NAIVE)}, judged against the "
            "faster naive layout"
            if n is best_naive
            else "for reference: the slower naive layout"
        )
        lines.append(
            f"- Served vs {n.name} at c=16: {s16.throughput:.0f} vs {n.at(16).throughput:.0f} "
            f"users/s, **{ratio:.2f}×** ({goal}); p99 {s16.p99_ms:.1f} vs "
            f"{n.at(16).p99_ms:.1f} ms: {lower}."
        )
    precision = "fp16" if served_s.values.get("fp16") else "fp32"
    same = [s for s in local if s.key.startswith(f"torch_{precision}_")] or local
    base = max(same, key=lambda s: s.levels[0].throughput)
    peaks = [(s.peak(), s) for s in systems if s.key.startswith("triton_") and s.peak()]
    peak, by = max(peaks, key=lambda p: p[0].throughput)
    ratio = peak.throughput / base.levels[0].throughput
    lines.append(
        f"- Served peak ({by.name}, c={peak.concurrency}) {peak.throughput:.0f} users/s vs "
        f"{base.name} {base.levels[0].throughput:.0f} users/s: **{ratio:.2f}×** (goal ≥ "
        f"{GOAL_VS_IN_PROCESS:g}×: {_verdict(ratio, GOAL_VS_IN_PROCESS)})."
    )
    fastest = max(local, key=lambda s: s.levels[0].throughput)
    if fastest is not base:
        lines.append(
            f"- Fastest in-process: {fastest.name}, {fastest.levels[0].throughput:.0f} users/s."
        )
    steps = []
    for m in STEPS[1:]:
        queue = served_s.values.get(f"{m}.queue_ms")
        if queue is None:
            continue
        compute = sum(served_s.values[f"{m}.{k}_ms"] for k in ("input", "infer", "output"))
        part = f"{m} queue {queue:.2f} / compute {compute:.2f}"
        if m != spec.CORE_MODEL and compute > 0:  # one request per execution
            ceiling = served_s.values.get(f"{m}.instances", 1.0) * 1e3 / compute
            part += f" (≤ {ceiling:.0f} req/s)"
        steps.append(part)
    if steps:
        lines.append(
            "- Steps at c=16, ms per request (ceiling: instances / compute): " + "; ".join(steps)
        )
    alone = [s for s in systems if s.key.startswith("step_") and s.peak()]
    if alone:
        lines.append(
            "- Python steps driven alone: "
            + ", ".join(
                f"{s.name} {s.peak().throughput:.0f} req/s at c={s.peak().concurrency}"
                for s in alone
            )
            + f" (served peak {peak.throughput:.0f})."
        )
    return [*lines, ""]
