"""``make bench-gpu``: the pipelines with the torch_gpu config set against what they replace, on
the same GPU, in one run, on the same inputs.

Sections (``--only`` picks some; each starts its own server with only its ensemble):

* ``text``: text_embedding against sentence-transformers in one process and against
  infinity-emb, with the per-step table of where each one-text request's time goes
  (:mod:`benchmarks.gpu.text`);
* ``image``: image_classification, one image per request, against in-process PyTorch
  (:mod:`benchmarks.gpu.image`);
* ``ctr``: ctr_ranking, one user per request, against in-process PyTorch and the naive FastAPI
  server (:mod:`benchmarks.gpu.ctr`);
* ``described``: digit_scans, a described pipeline whose core is a team's own torch module, one
  scan per request, against its FastAPI service on the same GPU (:mod:`benchmarks.gpu.described`).

Outputs are checked before timing (min cosine to sentence-transformers FP32; top-5; CTR
scores). Writes ``report.md``, ``results.json`` and plots under ``build/bench-gpu/``
(``--output``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

from benchmarks.gpu.text import (
    BULK_TEXTS,
    FULL,
    QUICK,
    WORKLOAD,
    text_section,
    text_summary,
)
from benchmarks.harness import machine, report
from benchmarks.harness.results import Run, System
from tritonrepo.paths import BUILD_DIR

SECTIONS = ("text", "image", "ctr", "described")


def gpu_facts() -> dict[str, str]:
    """GPU name, memory, PyTorch and CUDA versions."""
    import torch

    props = torch.cuda.get_device_properties(0)
    return {
        "gpu": f"{props.name} ({props.total_memory / 2**30:.0f} GiB, compute capability "
        f"{props.major}.{props.minor})",
        "torch": f"{torch.__version__} (CUDA {torch.version.cuda})",
    }


def header(run: Run) -> list[str]:
    """Title, machine, software, inputs and load."""
    m = run.machine
    mode = "quick mode: proves the harness runs" if run.quick else "full mode"
    return [
        "# GPU benchmark: the torch_gpu config set vs what it replaces",
        "",
        f"Run {run.started} ({mode}), sections: {', '.join(run.settings['sections'])}.",
        "",
        f"- **GPU:** {m['gpu']}; host {m['cpu']}, {m['cores']} cores, {m['memory']}.",
        f"- **Software:** PyTorch {m['torch']}, sentence-transformers "
        f"{m['sentence-transformers']}, numpy {m['numpy']}, Python {m['python']}; tritonserver "
        f"{m['tritonserver']}; tritonclient {m['tritonclient']} (perf_analyzer).",
        *[f"- **{k}:** {v}" for k, v in run.inputs.items()],
        *(
            [
                f"- **Load (text):** perf_analyzer, gRPC, async with a few client threads, closed "
                f"loop ({run.settings['window']}); one text per request at c = "
                f"{run.settings['single']}, {BULK_TEXTS} texts per request at c = "
                f"{run.settings['bulk']}. Throughput is texts/s for every text row."
            ]
            if "text" in run.settings["sections"]
            else []
        ),
        "",
    ]


def section_lines(systems: list[System], workload: str, out: Path) -> list[str]:
    """A workload's summary and detail tables and its plots."""
    mine = [s for s in systems if s.workload == workload]
    if not mine:
        return []
    levels = sorted({m.concurrency for s in mine for m in s.levels if m.concurrency})
    lines = [
        *report.summary_table(mine, report.UNITS.get(workload, "requests/s"), levels),
        "",
        *report.detail_table(mine),
        "",
    ]
    for path in report.plot(mine, workload, out):
        lines += [f"![{path.stem}]({path.name})", ""]
    return lines


def summary(run: Run) -> list[str]:
    """Every section's summary lines (measured value, bound, verdict)."""
    from benchmarks.gpu import ctr as gpu_ctr
    from benchmarks.gpu import described as gpu_described
    from benchmarks.gpu import image as gpu_image

    lines = []
    sections = run.settings["sections"]
    if "text" in sections:
        lines += text_summary([s for s in run.systems if s.workload == WORKLOAD])
    if "image" in sections:
        lines += gpu_image.summary([s for s in run.systems if s.workload == "image_classification"])
    if "ctr" in sections:
        lines += gpu_ctr.summary([s for s in run.systems if s.workload == "ctr_ranking"])
    if "described" in sections:
        lines += gpu_described.summary(
            [s for s in run.systems if s.workload == gpu_described.WORKLOAD]
        )
    return lines


def write_report(run: Run, out: Path) -> Path:
    """``report.md`` (machine, summary lines, per-step tables, tables per workload) and plots."""
    out.mkdir(parents=True, exist_ok=True)
    run.save(out / "results.json")
    lines = [*header(run), *summary(run)]
    for workload in (WORKLOAD, "image_classification", "ctr_ranking", "digit_scans"):
        lines += section_lines(run.systems, workload, out)
        if workload == WORKLOAD:
            lines += list(run.settings.get("step_tables", []))
        steps = out / f"steps-{workload}.md"
        if workload != WORKLOAD and steps.is_file():
            lines += [*steps.read_text().splitlines(), ""]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few seconds per system")
    parser.add_argument("--output", type=Path, default=BUILD_DIR / "bench-gpu")
    parser.add_argument(
        "--only", action="append", choices=SECTIONS, help="a section to run (default: all)"
    )
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print(
            "error: no CUDA GPU visible to PyTorch; run `make bench-gpu` on a GPU host",
            file=sys.stderr,
        )
        return 2
    knobs = QUICK if args.quick else FULL
    sections = [s for s in SECTIONS if s in (args.only or SECTIONS)]
    out = args.output
    out.mkdir(parents=True, exist_ok=True)
    run = Run(
        started=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        quick=args.quick,
        machine=machine.facts() | gpu_facts(),
        settings={
            "sections": sections,
            "single": list(knobs["single"]),
            "bulk": list(knobs["bulk"]),
            "window": knobs["window"].describe(),
        },
        inputs={},
    )
    try:
        if "text" in sections:
            text_section(run, knobs, out)
        if "image" in sections:
            from benchmarks.gpu import image as gpu_image

            run.systems += gpu_image.run_section(args.quick, out)
        if "ctr" in sections:
            from benchmarks.gpu import ctr as gpu_ctr

            run.systems += gpu_ctr.run_section(args.quick, out)
        if "described" in sections:
            from benchmarks.gpu import described as gpu_described

            run.systems += gpu_described.run_section(args.quick, out)
    finally:
        path = write_report(run, out)
    print("\n".join(summary(run)))
    print(f"report: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
