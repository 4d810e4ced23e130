"""Turn a :class:`benchmarks.harness.results.Run` into a markdown report and PNG plots
(matplotlib)."""

from __future__ import annotations

import math
from pathlib import Path

from benchmarks.ensembles import feature_cost
from benchmarks.harness import machine
from benchmarks.harness.results import IN_PROCESS, Run, System
from benchmarks.harness.targets import Target

WORKLOADS = ("text_embedding", "ctr_ranking", "ctr_session", "image_classification")
UNITS = {
    "text_embedding": "texts/s",
    "ctr_ranking": "requests/s",
    "ctr_session": "events/s",
    "image_classification": "images/s",
    "digit_scans": "scans/s",
}


def _num(value: float | None, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.{digits}f}"


def header(run: Run) -> list[str]:
    """Title, machine, inputs and load sources."""
    m = run.machine
    software = ", ".join(
        f"{name} {m[name]}" for name in machine.PACKAGES if name in m and name != "tritonclient"
    )
    mode = (
        "quick mode: proves the harness runs; its numbers are not a benchmark"
        if run.quick
        else "full mode"
    )
    return [
        "# Benchmark: the served ensembles vs what users run today",
        "",
        f"Run {run.started} ({mode}).",
        "",
        f"- **Machine:** {m['cpu']}, {m['cores']} cores, {m['memory']}; {m['cpu_flags']}; "
        f"{m['os']}; Python {m['python']}.",
        f"- **Server:** tritonserver {m['tritonserver']}, CPU configs "
        f"(`--model-config-name=cpu`); tritonclient {m['tritonclient']} (perf_analyzer).",
        f"- **Software:** {software}.",
        *[f"- **{k}:** {v}" for k, v in run.inputs.items()],
        f"- **Load:** Triton systems: perf_analyzer, gRPC, closed loop, one concurrency level at a "
        f"time ({run.settings['window']}); naive servers and the cross-check: the Python load "
        f"generator (`benchmarks/harness/loadgen.py`, {run.settings['loadgen_s']} s per level "
        f"after 1 s warm-up, longer until it holds an answer). In-process systems "
        f"run alone.",
        "",
    ]


def targets_table(targets: list[Target]) -> list[str]:
    """The comparisons of :mod:`benchmarks.harness.targets`: measured ratio, bound and verdict."""
    lines = [
        "## Goals (ratios from this run)",
        "",
        "| comparison | value | goal | verdict | detail |",
        "|---|---|---|---|---|",
    ]
    for t in targets:
        goal = f"{'≥' if t.higher else '≤'} {t.goal:g}"
        value = "–" if t.value is None else f"{t.value:.2f}"
        lines.append(f"| {t.name} | {value} | {goal} | {t.verdict()} | {t.detail} |")
    return [*lines, ""]


def summary_table(systems: list[System], unit: str, levels: list[int]) -> list[str]:
    """One row per system: throughput and latency at concurrency 1 and 16 (or the highest
    level measured), and the peak."""
    high = 16 if 16 in levels else max(levels)
    lines = [
        f"| system | load | accuracy | c=1 {unit} | c=1 p50 ms | c={high} {unit} | "
        f"c={high} p50 / p95 / p99 ms | peak {unit} (at c) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for s in systems:
        if s.load == IN_PROCESS:
            m = s.levels[0]
            lines.append(  # one call at a time: its latency goes under c=1
                f"| {s.name} | {s.load} | {s.accuracy} | {_num(m.throughput)} | "
                f"{_num(m.p50_ms)} | – | – | {_num(m.throughput)} |"
            )
            continue
        one, many, peak = s.at(1), s.at(high), s.peak()
        lines.append(
            f"| {s.name} | {s.load} | {s.accuracy} | {_num(one and one.throughput)} | "
            f"{_num(one and one.p50_ms)} | {_num(many and many.throughput)} | "
            f"{_num(many and many.p50_ms)} / {_num(many and many.p95_ms)} / "
            f"{_num(many and many.p99_ms)} | "
            f"{_num(peak and peak.throughput)} ({peak.concurrency if peak else '–'}) |"
        )
    return lines


def detail_table(systems: list[System]) -> list[str]:
    """Every level of every served system."""
    lines = [
        "| system | concurrency | throughput | p50 ms | p95 ms | p99 ms | errors |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in systems:
        for m in s.levels:
            level = "in-process" if s.load == IN_PROCESS else str(m.concurrency)
            lines.append(
                f"| {s.name} | {level} | {_num(m.throughput)} | {_num(m.p50_ms)} | "
                f"{_num(m.p95_ms)} | {_num(m.p99_ms)} | {m.errors} |"
            )
    return lines


def plot(systems: list[System], workload: str, out_dir: Path) -> list[Path]:
    """``<workload>_throughput.png`` and ``<workload>_latency.png``: throughput and p50/p95/p99
    latency against concurrency (in-process throughputs as dashed horizontal lines)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    served = [s for s in systems if s.load != IN_PROCESS and s.levels]
    local = [s for s in systems if s.load == IN_PROCESS and s.levels]
    unit = UNITS[workload]
    paths = []
    levels = sorted({m.concurrency for s in served for m in s.levels})
    fig, ax = plt.subplots(figsize=(11, 7.5))
    for s in served:
        ax.plot(
            [m.concurrency for m in s.levels],
            [m.throughput for m in s.levels],
            marker="o",
            label=s.name,
        )
    styles = iter(["--", ":", "-.", (0, (5, 1)), (0, (3, 1, 1, 1)), (0, (1, 3))] * 3)
    for s in local:
        ax.axhline(s.levels[0].throughput, linestyle=next(styles), linewidth=1.2, color="grey",
                   label=f"{s.name} ({s.levels[0].throughput:.0f})")  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_xticks(levels, [str(level) for level in levels])
    ax.set_xlabel("concurrency (requests in flight)")
    ax.set_ylabel(unit)
    ax.set_title(f"{workload}: throughput vs concurrency (dashed: in-process, no server)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2)
    fig.tight_layout()
    paths.append(out_dir / f"{workload}_throughput.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, 3, figsize=(14, 4.8), sharey=True)
    for ax, pct in zip(axes, ("p50", "p95", "p99"), strict=True):
        for s in served:
            ax.plot(
                [m.concurrency for m in s.levels],
                [getattr(m, f"{pct}_ms") for m in s.levels],
                marker="o",
                label=s.name,
            )
        ax.set_xscale("log", base=2)
        ax.set_xticks(levels, [str(level) for level in levels])
        ax.set_yscale("log")
        ax.set_xlabel("concurrency")
        ax.set_title(f"{pct} latency")
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("ms")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="lower center", ncol=2)
    fig.suptitle(f"{workload}: latency vs concurrency")
    fig.tight_layout(rect=(0, 0.05 + 0.03 * ((len(served) + 1) // 2), 1, 1))
    paths.append(out_dir / f"{workload}_latency.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths


def profile_lines(systems: list[System]) -> list[str]:
    """Per-step time per request (Triton statistics) of the systems that recorded it."""
    lines = []
    for s in systems:
        steps = sorted({k.rsplit(".", 1)[0] for k in s.values if k.endswith("_ms")})
        if not steps:
            continue
        parts = [
            f"{step}: queue {s.values[f'{step}.queue_ms']:.1f}, infer "
            f"{s.values[f'{step}.infer_ms']:.1f}"
            for step in steps
        ]
        lines.append(f"- {s.name}: " + "; ".join(parts) + " (ms per request)")
    return lines


def write(run: Run, targets: list[Target], out_dir: Path) -> Path:
    """Write ``report.md`` and the plots into ``out_dir``; returns the report's path."""
    lines = header(run) + targets_table(targets)
    levels = list(run.settings["levels"])  # type: ignore[call-overload]
    details = []
    for workload in WORKLOADS:
        systems = [s for s in run.systems if s.workload == workload]
        if not systems:
            continue
        plots = plot(systems, workload, out_dir)
        lines += [f"## {workload}", "", *summary_table(systems, UNITS[workload], levels), ""]
        notes = [f"- {s.name}: {s.notes}" for s in systems if s.notes]
        lines += ["Notes:", "", *notes, ""] if notes else []
        profile = profile_lines(systems)
        if profile:
            high = 16 if 16 in levels else max(levels)
            lines += [
                f"Per-step statistics (Triton, at the profiled level ≤ c={high}):",
                "",
                *profile,
                "",
            ]
        lines += [f"![{p.stem}]({p.name})" for p in plots] + [""]
        details += [f"### {workload}", "", *detail_table(systems), ""]
    costs = list(run.settings.get("feature_costs", []))  # type: ignore[call-overload]
    lines += feature_cost.report_lines(costs, run.systems)
    lines += ["## Every level", "", *details]
    path = out_dir / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path
