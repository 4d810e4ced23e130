"""``make bench``: the served ensembles against what users run today, in one run.

Usage: ``python -m benchmarks [--quick] [--workload text_embedding|ctr|image_classification]
[--levels 1,4,16] [--output DIR]``

One run measures, one system after another on the same inputs (``benchmarks/harness/inputs.py``):
in-process baselines, the naive FastAPI servers, and the Triton ensembles with their variants
(``benchmarks/ensembles/text_embedding.py``, ``benchmarks/ensembles/ctr.py``,
``benchmarks/ensembles/image.py``). It checks
every system's outputs before timing it, then writes ``results.json``, ``report.md`` (a table per
workload and the speed comparisons of ``benchmarks.harness.targets`` as ratios from this run) and
PNG
plots of throughput and p50/p95/p99 latency against concurrency into ``build/bench/``.
``--quick`` (CI) takes a few seconds per system and asserts no speed.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import os
import sys
from pathlib import Path

import numpy as np

from benchmarks.ensembles import ctr, feature_cost, image, text_embedding
from benchmarks.ensembles.guard import guard_cost
from benchmarks.ensembles.guard import steps as guard_steps
from benchmarks.harness import inputs, machine, report, targets, triton_side
from benchmarks.harness.results import Run
from benchmarks.harness.settings import Settings
from tritonrepo.paths import BUILD_DIR, MODEL_REPOSITORY
from tritonrepo.text import spec
from tritonrepo.text.tokenization import TextTokenizer

WORKLOADS = ("text_embedding", "ctr", "image_classification")


def describe_inputs(
    texts: list[str], data: inputs.CtrInputs | None, files: list[bytes] | None = None
) -> dict[str, str]:
    """The report's description of the inputs (token lengths measured with the model's own
    tokenizer, before truncation)."""
    out = {}
    if texts:
        tokenizer = TextTokenizer(
            MODEL_REPOSITORY / spec.TOKENIZE_MODEL / "1" / "tokenizer.json", 100_000
        )
        lengths = tokenizer.encode(texts)[1].sum(axis=1)
        p10, p50, p90 = np.percentile(lengths, [10, 50, 90]).astype(int)
        out["Texts"] = (
            f"{len(texts)} real texts (`reference_data/text_corpus.py`: numpy docstrings and the "
            f"READMEs of pinned packages; 40 % short queries, 40 % paragraphs, 20 % documents); "
            f"tokens p10 {p10}, p50 {p50}, p90 {p90}, max {lengths.max()} (the model truncates "
            f"at {spec.MAX_SEQ_LENGTH})"
        )
    if data is not None:
        out["CTR"] = (
            f"{len(data.requests)} held-out click-log users, {inputs.CANDIDATES_PER_REQUEST} "
            f"candidates per request; {len(data.sessions)} sessions of "
            f"{inputs.SESSION_EVENTS} events; AUC on {len(data.heldout.rows)} held-out rows"
        )
    if files:
        out["Images"] = (
            f"{len(files)} JPEG files of real photographs (scikit-image's, cropped, flipped and "
            f"re-lit: `benchmarks/ensembles/image.py`), {min(map(len, files)) // 1024}-"
            f"{max(map(len, files)) // 1024} KiB, one per request"
        )
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="a few seconds per system (CI)")
    parser.add_argument(
        "--workload",
        choices=WORKLOADS,
        action="append",
        help="only this workload (repeatable; default: all)",
    )
    parser.add_argument("--levels", help="concurrency levels, e.g. 1,4,16 (default 1..32)")
    parser.add_argument("--output", type=Path, default=BUILD_DIR / "bench")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; exit 1 with a one-line reason when a system cannot be measured."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    args = parse_args(argv)
    workloads = args.workload or list(WORKLOADS)
    out = args.output
    out.mkdir(parents=True, exist_ok=True)
    levels = tuple(int(x) for x in args.levels.split(",")) if args.levels else None
    settings = Settings.make(args.quick, out, levels)
    texts = inputs.texts(settings.texts) if "text_embedding" in workloads else []
    data = (
        inputs.ctr_inputs(settings.ranking_requests, settings.sessions)
        if "ctr" in workloads
        else None
    )
    files = image.images(settings.images) if "image_classification" in workloads else []
    run = Run(
        started=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        quick=settings.quick,
        machine=machine.facts(),
        settings={
            "levels": list(settings.levels),
            "window": settings.window.describe(),
            "loadgen_s": settings.loadgen_s,
        },
        inputs=describe_inputs(texts, data, files),
    )
    workers = len(os.sched_getaffinity(0))
    console = Console(stderr=True)
    steps = ctr.steps(settings) * ("ctr" in workloads)
    steps += text_embedding.steps(settings) * ("text_embedding" in workloads)
    steps += guard_steps(settings) * ("text_embedding" in workloads)  # the HTTP guard's cost
    steps += image.steps(settings) * bool(files)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
    ) as bar:
        task = bar.add_task("starting", total=steps)
        settings = dataclasses.replace(
            settings, progress=lambda what: bar.update(task, advance=1, description=what)
        )
        failed = None
        try:
            if texts:
                local, reference = text_embedding.in_process(texts, settings)
                run.systems += local
                run.systems += text_embedding.naive_servers(texts, reference, settings, workers)
            if data is not None:
                local, model = ctr.in_process(data, settings)
                run.systems += local
                run.systems += ctr.naive_servers(data, model, settings, workers)
            if files:
                local, pipeline = image.in_process(files, settings)
                run.systems += local
                run.systems += image.naive_servers(files, settings, workers)
            run.save(out / "results.json")
            models = (("text_embedding",) if texts else ()) + (
                ("ctr_ranking", "ctr_session") if data is not None else ()
            )
            models += (image.WORKLOAD, image.spec.RESNET50_MODEL) if files else ()
            with triton_side.start_server(out, models) as server:
                if texts:
                    run.systems += text_embedding.triton(server, texts, reference, settings)
                    run.systems += guard_cost(server, texts, settings)  # the HTTP guard's cost
                    run.save(out / "results.json")
                if data is not None:
                    run.systems += ctr.triton(server, data, model, settings)
                    run.save(out / "results.json")
                if files:
                    run.systems += image.triton(server, files, pipeline, settings)
                run.settings["feature_costs"] = feature_cost.feature_costs(server)
        except (RuntimeError, OSError) as exc:
            failed = exc
    # What was measured is written even when a later system failed.
    run.save(out / "results.json")
    evaluated = targets.evaluate(run)
    path = report.write(run, evaluated, out)
    if failed is not None:
        console.print(f"[red]error:[/red] {failed} (partial report: {path})")
        return 1
    for t in evaluated:
        console.print(
            f"{t.verdict():>22}  {t.name}: {'–' if t.value is None else f'{t.value:.2f}'}"
            f" (goal {'≥' if t.higher else '≤'} {t.goal:g})"
        )
    console.print(f"report: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
