"""``make bench-pipelines``' markdown report: lines, phases, and the served/in-process table."""

from __future__ import annotations

from pathlib import Path

from benchmarks.pipelines.served import WARMUP_S, Result, Row
from benchmarks.pipelines.vs_fastapi import SERVED, comparison, comparison_section


def _ratio(a: Row | None, b: Row | None) -> str:
    if not (a and b and b.items_per_s):
        return "–"
    ratio = a.items_per_s / b.items_per_s
    return f"{ratio:.2f}×" if ratio >= 0.1 else f"{ratio:.2g}×"


def report(results: list[Result], facts: dict[str, str], seconds: float, started: str) -> str:
    """The markdown report: lines, phases, and the served/in-process table."""
    lines = [
        "# Benchmark: described pipelines, served vs in-process",
        "",
        f"Run {started}: `python -m benchmarks.pipelines` ({seconds:g} s per measurement after "
        f"{WARMUP_S:g} s warm-up). Machine: {facts['cpu']}, {facts['cores']} cores, "
        f"{facts['memory']}; Python {facts['python']}, onnxruntime {facts['onnxruntime']}, "
        f"tritonserver {facts['tritonserver']}, CPU configs.",
        "",
        "## Lines the user wrote",
        "",
        "Non-blank, non-comment lines; `.py` = the folder's modules except `__init__.py` and "
        "`check_*.py`; docstring lines counted apart.",
        "",
        "| pipeline | pipeline.toml | Python code | total | + Python docstring lines | files |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        files = ", ".join(f"`{Path(f['path']).name}` {f['code']}" for f in r.lines["files"])
        lines.append(
            f"| {r.pipeline} | {r.lines['toml']} | {r.lines['python_code']} | "
            f"**{r.lines['total']}** | {r.lines['python_docstrings']} | {files} |"
        )
    phase_names = list(results[0].phases_s) if results else []
    lines += [
        "",
        "## Description to first served answer (seconds)",
        "",
        "`generate --check`: the generator's parse, checks and rendering against the checkout "
        "(writes nothing); copy: the generated folders into a fresh temporary repository; build: "
        "`builders.pipeline.build NAME --repository TMP` (model obtained, parity-checked, "
        "written); server: the launcher, only that pipeline, until READY (including its probe "
        "inference); first infer: a new HTTP client's first request.",
        "",
        "| pipeline | " + " | ".join(phase_names) + " | other jobs' CPU |",
        "|---|" + "---|" * (len(phase_names) + 1),
    ]
    for r in results:
        cells = [f"**{v:.1f}**" if k == "total" else f"{v:.2f}" for k, v in r.phases_s.items()]
        cells.append(f"{r.phases_foreign_cpu:.0%}")
        lines.append(f"| {r.pipeline} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Served vs in-process, one item per request",
        "",
        "Closed loop over the description's sample rows (`samples()`), one row per request; "
        "served: HTTP through the HTTP guard, `PipelineClient`, one per worker thread, the "
        "fresh server above; "
        "in-process: the same functions and one ONNX Runtime session shared by the threads "
        "(the served core's settings: one intra-op thread per core, no spinning), server "
        "stopped. Other jobs' CPU: the share of the cores that processes outside this "
        "benchmark used during the measurement (a shared machine). Ratio: served / in-process "
        "at the same concurrency; for the best-batch row, served c=16 / it.",
        "",
        "FastAPI rows: the same functions behind one FastAPI route (JSON body), one ONNX Runtime "
        "session per worker, gunicorn with uvicorn workers, each layout alone on the machine.",
        "",
        "| pipeline | system | concurrency | items/s | p50 ms | p99 ms | ratio | other jobs' CPU |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        served = {x.concurrency: x for x in r.rows if x.system == SERVED}
        local = {x.concurrency: x for x in r.rows if x.system.startswith("in-process (")}
        best = next((x for x in r.rows if "best batch" in x.system), None)
        for x in r.rows:
            if x.system.startswith("served"):
                ratio = _ratio(x, local.get(x.concurrency))
            elif x is best:
                ratio = f"{_ratio(served.get(16), x)} (served c=16 / this)"
            else:
                ratio = ""
            note = f" ({x.notes})" if x.notes else ""
            errors = f", {x.errors} errors" if x.errors else ""
            lines.append(
                f"| {r.pipeline} | {x.system}{note}{errors} | {x.concurrency} | "
                f"{x.items_per_s:.1f} | {x.p50_ms:.2f} | {x.p99_ms:.2f} | {ratio} | "
                f"{x.foreign_cpu:.0%} |"
            )

    lines += comparison_section([e for r in results for e in comparison(r.pipeline, r.rows)])
    lines += [
        "",
        "In-process, where one item's time goes (batch 1, mean ms) and the batch sweep:",
        "",
    ]
    for r in results:
        stages = ", ".join(f"{k} {v:.2f}" for k, v in r.stage_ms_batch1.items())
        sweep = ", ".join(f"{b}: {v:.0f}" for b, v in r.batch_sweep.items())
        lines.append(
            f"- **{r.pipeline}** ({r.sample_rows} sample rows): {stages}; "
            f"items/s by batch {sweep}. Checks: {r.checks}."
        )
    return "\n".join(lines) + "\n"
