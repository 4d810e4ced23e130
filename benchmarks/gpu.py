"""``make bench-gpu``: the ensembles with the torch_gpu config set against what they replace, on
the same GPU, in one run, on the same inputs.

Sections (``--only`` picks some; each starts its own server with only its ensemble):

* ``text``: text_embedding against sentence-transformers (below), with the per-step table of
  where each one-text request's time goes (:mod:`benchmarks.step_table`);
* ``image``: image_classification, one image per request, against in-process PyTorch
  (:mod:`benchmarks.gpu_image`);
* ``ctr``: ctr_ranking, one user per request, against in-process PyTorch and the naive FastAPI
  server (:mod:`benchmarks.gpu_ctr`).

Text systems:

* sentence-transformers FP16 in one process at several batch sizes (the baseline is the best of
  them) and FP32 (the accuracy reference), and HF ``tokenizers`` alone, which bounds a one-process
  pipeline on the host;
* the served ensemble (tokenizer instances on the host, encoder and pooling on the GPU), driven
  by perf_analyzer over gRPC with one text per request and with 64 texts per request (the
  ensemble's ``max_batch_size``, how bulk clients send), across concurrency levels.

Outputs are checked before timing (min cosine to sentence-transformers FP32; top-5; CTR
scores). Writes ``report.md``, ``results.json`` and plots under ``build/bench-gpu/``
(``--output``).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks import inputs, machine, report, step_table
from benchmarks.loadgen import Measurement
from benchmarks.perf_analyzer import Window
from benchmarks.results import IN_PROCESS, Run, System
from benchmarks.text_embedding import STEPS, min_cosine, require
from benchmarks.triton_side import sweep_steps
from builders.gates.accuracy_gate import TOLERANCES
from tritonrepo.paths import BUILD_DIR, MODEL_REPOSITORY
from tritonrepo.server.launcher import ServerOptions, TritonServer, free_port
from tritonrepo.text import spec
from tritonrepo.text.tokenization import TextTokenizer
from tritonrepo_client import EmbeddingClient

WORKLOAD = "text_embedding"
ST_BATCHES = (32, 128, 512)
SINGLE_LEVELS = (1, 16, 64, 256)  # the per-step table's levels: idle, moderate, saturated
BULK_LEVELS = (1, 4, 16)
BULK_TEXTS = spec.MAX_BATCH_SIZE  # texts per bulk request: the ensemble's max_batch_size
QUICK = {"texts": 512, "single": (1, 16), "bulk": (1, 4), "window": Window(1000, 999, 3)}
FULL = {"texts": 2048, "single": SINGLE_LEVELS, "bulk": BULK_LEVELS, "window": Window(1000, 25, 4)}
SECTIONS = ("text", "image", "ctr")
# Bounds the one-text rows are checked against in summary(): p50 at c=1 (ms) and the bulk ratio.
C1_P50_GOAL_MS = 4.0
BULK_GOAL = 2.8


def in_process(texts: list[str]) -> tuple[list[System], np.ndarray]:
    """sentence-transformers FP16 at each of ``ST_BATCHES`` and FP32 at 512, on the GPU, and
    the tokenizer alone (texts/s, one timed pass after a warm-up pass).

    Returns:
        The systems, and the FP32 embeddings (FP32 ``[n, 384]``, the accuracy reference).
    """
    import torch
    from sentence_transformers import SentenceTransformer

    nan = float("nan")
    systems = []

    def timed(encode) -> tuple[float, np.ndarray]:
        encode()
        torch.cuda.synchronize()
        started = time.perf_counter()
        out = encode()
        torch.cuda.synchronize()
        return len(texts) / (time.perf_counter() - started), out

    model = SentenceTransformer(str(spec.source_model_dir()), device="cuda")
    rate, reference = timed(lambda: model.encode(texts, batch_size=512, normalize_embeddings=True))
    systems.append(
        System(
            WORKLOAD,
            "st_fp32_b512",
            "sentence-transformers FP32, batch 512",
            IN_PROCESS,
            "reference",
            [Measurement(0, rate, nan, nan, nan, len(texts), 0)],
        )
    )
    model.half()
    for batch in ST_BATCHES:
        rate, got = timed(
            lambda b=batch: model.encode(texts, batch_size=b, normalize_embeddings=True)
        )
        cosine = min_cosine(np.asarray(got, dtype=np.float32), reference)
        systems.append(
            System(
                WORKLOAD,
                f"st_fp16_b{batch}",
                f"sentence-transformers FP16, batch {batch}",
                IN_PROCESS,
                f"min cos {cosine:.5f}",
                [Measurement(0, rate, nan, nan, nan, len(texts), 0)],
                "encode(): sorts texts by length, tokenizes on one thread",
                {"min_cosine": cosine},
            )
        )
    tokenizer = TextTokenizer(
        MODEL_REPOSITORY / spec.TOKENIZE_MODEL / "1" / "tokenizer.json", spec.MAX_SEQ_LENGTH
    )
    started = time.perf_counter()
    for start in range(0, len(texts), 512):
        tokenizer.encode(texts[start : start + 512])
    rate = len(texts) / (time.perf_counter() - started)
    systems.append(
        System(
            WORKLOAD,
            "tokenizer",
            "HF tokenizers alone, batch 512",
            IN_PROCESS,
            "",
            [Measurement(0, rate, nan, nan, nan, len(texts), 0)],
            "the host-side work every system above includes",
        )
    )
    return systems, reference


def served(
    server: TritonServer, texts: list[str], reference: np.ndarray, knobs: dict, workdir: Path
) -> tuple[list[System], list[str]]:
    """The ensemble with one text and with ``BULK_TEXTS`` texts per request (texts/s).

    Returns:
        The systems, and the per-step tables (markdown lines) of each sweep.
    """
    with EmbeddingClient(server.options.grpc_url, "grpc") as client:
        got = np.concatenate([client.embed(texts[i : i + 64]) for i in range(0, len(texts), 64)])
    cosine = min_cosine(got, reference)
    require("text_embedding (torch_gpu)", cosine, TOLERANCES["fp16"].min_cosine)
    data = inputs.write_text_data(workdir / "texts.json", texts)
    systems, tables = [], []
    for key, name, levels, batch in (
        (
            "triton_gpu_single",
            "Triton text_embedding, torch_gpu, 1 text/request",
            knobs["single"],
            1,
        ),
        (
            "triton_gpu_bulk",
            f"Triton text_embedding, torch_gpu, {BULK_TEXTS} texts/request",
            knobs["bulk"],
            BULK_TEXTS,
        ),
    ):
        done = sweep_steps(
            server, spec.ENSEMBLE, data, levels, knobs["window"], workdir, STEPS, batch_size=batch
        )
        in_texts = [
            dataclasses.replace(m, throughput=m.throughput * batch) for m in done.measurements()
        ]
        tables += step_table.lines(done, title=f"Per step: {name}")
        systems.append(
            System(
                WORKLOAD,
                key,
                name,
                "perf_analyzer",
                f"min cos {cosine:.5f}",
                in_texts,
                "; ".join([step_table.client_note(done), *done.failures]),
                {"min_cosine": cosine} | step_table.client_values(done),
            )
        )
        print(
            f"{name}: " + ", ".join(f"c{m.concurrency} {m.throughput:.0f}" for m in in_texts),
            flush=True,
        )
    return systems, tables


def gpu_facts() -> dict[str, str]:
    """GPU name, memory, PyTorch and CUDA versions."""
    import torch

    props = torch.cuda.get_device_properties(0)
    return {
        "gpu": f"{props.name} ({props.total_memory / 2**30:.0f} GiB, compute capability "
        f"{props.major}.{props.minor})",
        "torch": f"{torch.__version__} (CUDA {torch.version.cuda})",
    }


def text_summary(systems: list[System]) -> list[str]:
    """The text comparisons, each with its measured value, bound and verdict: one text per
    request at its peak ≥ 1.0× the best sentence-transformers FP16 batch, p50 at c=1 ≤
    ``C1_P50_GOAL_MS``, ``BULK_TEXTS`` texts per request ≥ ``BULK_GOAL``×, served min cosine ≥
    0.999."""
    baselines = [s for s in systems if s.key.startswith("st_fp16")]
    single = next((s for s in systems if s.key == "triton_gpu_single" and s.peak()), None)
    bulk = next((s for s in systems if s.key == "triton_gpu_bulk" and s.peak()), None)
    if not baselines or single is None:
        return ["## text_embedding", "", "Not evaluated: a system was not measured.", ""]
    st = max(baselines, key=lambda s: s.levels[0].throughput)
    base = st.levels[0].throughput
    lines = [
        "## text_embedding",
        "",
        f"Baseline: in-process {st.name} ({base:.0f} texts/s, the best sentence-transformers "
        "batch).",
        "",
    ]

    def verdict(ok: bool, miss: str) -> str:
        return "met" if ok else f"missed by {miss}"

    peak = single.peak()
    ratio = peak.throughput / base
    lines.append(
        f"- {single.name}: {peak.throughput:.0f} texts/s at c={peak.concurrency}: "
        f"**{ratio:.2f}×** (goal ≥ 1.0×: {verdict(ratio >= 1.0, f'{100 * (1 - ratio):.0f} %')})."
    )
    c1 = single.at(1)
    if c1 is not None:
        ok = c1.p50_ms <= C1_P50_GOAL_MS
        lines.append(
            f"- {single.name}, c=1 p50: **{c1.p50_ms:.1f} ms** (goal ≤ {C1_P50_GOAL_MS:.0f} ms: "
            f"{verdict(ok, f'{c1.p50_ms - C1_P50_GOAL_MS:.1f} ms')})."
        )
    if bulk is not None:
        peak = bulk.peak()
        ratio = peak.throughput / base
        lines.append(
            f"- {bulk.name}: {peak.throughput:.0f} texts/s at c={peak.concurrency}: "
            f"**{ratio:.2f}×** (goal ≥ {BULK_GOAL}×: "
            f"{verdict(ratio >= BULK_GOAL, f'{100 * (1 - ratio / BULK_GOAL):.0f} %')})."
        )
    cosine = single.values.get("min_cosine")
    if cosine is not None:
        goal = TOLERANCES["fp16"].min_cosine
        lines.append(
            f"- Served min cosine vs sentence-transformers FP32: **{cosine:.5f}** (goal ≥ "
            f"{goal}: {verdict(cosine >= goal, f'{goal - cosine:.5f}')})."
        )
    return [*lines, ""]


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
        f"- **Load (text):** perf_analyzer, gRPC, async with a few client threads, closed loop "
        f"({run.settings['window']}); one text per request at c = {run.settings['single']}, "
        f"{BULK_TEXTS} texts per request at c = {run.settings['bulk']}. Throughput is texts/s "
        "for every text row.",
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
    from benchmarks import gpu_ctr, gpu_image

    lines = []
    sections = run.settings["sections"]
    if "text" in sections:
        lines += text_summary([s for s in run.systems if s.workload == WORKLOAD])
    if "image" in sections:
        lines += gpu_image.summary([s for s in run.systems if s.workload == "image_classification"])
    if "ctr" in sections:
        lines += gpu_ctr.summary([s for s in run.systems if s.workload == "ctr_ranking"])
    return lines


def write_report(run: Run, out: Path) -> Path:
    """``report.md`` (machine, summary lines, per-step tables, tables per workload) and plots."""
    out.mkdir(parents=True, exist_ok=True)
    run.save(out / "results.json")
    lines = [*header(run), *summary(run)]
    for workload in (WORKLOAD, "image_classification", "ctr_ranking"):
        lines += section_lines(run.systems, workload, out)
        if workload == WORKLOAD:
            lines += list(run.settings.get("step_tables", []))
        steps = out / f"steps-{workload}.md"
        if workload != WORKLOAD and steps.is_file():
            lines += [*steps.read_text().splitlines(), ""]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def text_section(run: Run, knobs: dict, out: Path) -> None:
    """The text systems into ``run`` (in-process first, then a server with text_embedding)."""
    texts = inputs.texts(knobs["texts"])
    run.inputs["texts"] = f"{len(texts)} real mixed texts (reference_data.text_corpus, eval split)"
    systems, reference = in_process(texts)
    run.systems += systems
    for s in systems:
        print(f"{s.name}: {s.levels[0].throughput:.0f} texts/s {s.accuracy}", flush=True)
    options = ServerOptions(
        models=(spec.ENSEMBLE,),
        http_port=free_port(),
        grpc_port=free_port(),
        metrics_port=free_port(),
        model_config_name="torch_gpu",
        log_file=out / "tritonserver.log",
    )
    with TritonServer(options) as server:
        systems, tables = served(server, texts, reference, knobs, out)
    run.systems += systems
    run.settings["step_tables"] = tables


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
            from benchmarks import gpu_image

            run.systems += gpu_image.run_section(args.quick, out)
        if "ctr" in sections:
            from benchmarks import gpu_ctr

            run.systems += gpu_ctr.run_section(args.quick, out)
    finally:
        path = write_report(run, out)
    print("\n".join(summary(run)))
    print(f"report: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
