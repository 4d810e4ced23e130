"""``make bench-gpu``: text_embedding with the torch_gpu config set against sentence-transformers
on the same GPU, in one run, on the same real mixed texts.

Systems:

* sentence-transformers FP16 in one process at several batch sizes (the baseline is the best of
  them) and FP32 (the accuracy reference), and HF ``tokenizers`` alone, which bounds a one-process
  pipeline on the host;
* the served ensemble (tokenizer instances on the host, encoder and pooling on the GPU), driven
  by perf_analyzer over gRPC with one text per request and with 64 texts per request (the
  ensemble's ``max_batch_size``, how bulk clients send), across concurrency levels.

Outputs are checked before timing (min cosine to sentence-transformers FP32). Writes
``report.md``, ``results.json`` and plots under ``build/bench-gpu/`` (``--output``).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks import inputs, machine, report
from benchmarks.loadgen import Measurement
from benchmarks.perf_analyzer import Window
from benchmarks.results import IN_PROCESS, Run, System
from benchmarks.text_embedding import STEPS, min_cosine, require
from benchmarks.triton_side import sweep
from builders.accuracy_gate import TOLERANCES
from tritonrepo.launcher import ServerOptions, TritonServer, free_port
from tritonrepo.paths import BUILD_DIR, MODEL_REPOSITORY
from tritonrepo.text import spec
from tritonrepo.text.tokenization import TextTokenizer
from tritonrepo_client import EmbeddingClient

WORKLOAD = "text_embedding"
ST_BATCHES = (32, 128, 512)
SINGLE_LEVELS = (1, 8, 32, 128, 256)
BULK_LEVELS = (1, 4, 16)
BULK_TEXTS = spec.MAX_BATCH_SIZE  # texts per bulk request: the ensemble's max_batch_size
QUICK = {"texts": 512, "single": (1, 16), "bulk": (1, 4), "window": Window(1000, 999, 3)}
FULL = {"texts": 2048, "single": SINGLE_LEVELS, "bulk": BULK_LEVELS, "window": Window(1000, 25, 4)}


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
) -> list[System]:
    """The ensemble with one text and with ``BULK_TEXTS`` texts per request (texts/s)."""
    with EmbeddingClient(server.options.grpc_url, "grpc") as client:
        got = np.concatenate([client.embed(texts[i : i + 64]) for i in range(0, len(texts), 64)])
    cosine = min_cosine(got, reference)
    require("text_embedding (torch_gpu)", cosine, TOLERANCES["fp16"].min_cosine)
    data = inputs.write_text_data(workdir / "texts.json", texts)
    systems = []
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
        measured, stats, failures = sweep(
            server, spec.ENSEMBLE, data, levels, knobs["window"], workdir, STEPS, batch_size=batch
        )
        in_texts = [dataclasses.replace(m, throughput=m.throughput * batch) for m in measured]
        batches = ", ".join(
            f"c{lv}: {s[spec.ENCODER_MODEL].average_batch:.0f}" for lv, s in stats.items()
        )
        systems.append(
            System(
                WORKLOAD,
                key,
                name,
                "perf_analyzer",
                f"min cos {cosine:.5f}",
                in_texts,
                "; ".join([f"encoder average batch {batches}", *failures]),
                {"min_cosine": cosine},
            )
        )
        print(
            f"{name}: " + ", ".join(f"c{m.concurrency} {m.throughput:.0f}" for m in in_texts),
            flush=True,
        )
    return systems


def gpu_facts() -> dict[str, str]:
    """GPU name, memory, PyTorch and CUDA versions."""
    import torch

    props = torch.cuda.get_device_properties(0)
    return {
        "gpu": f"{props.name} ({props.total_memory / 2**30:.0f} GiB, compute capability "
        f"{props.major}.{props.minor})",
        "torch": f"{torch.__version__} (CUDA {torch.version.cuda})",
    }


def summary(run: Run) -> list[str]:
    """The target lines: each served request size at its peak vs the best sentence-transformers
    FP16 batch (goal ≥ 1.0×, issue 9)."""
    baselines = [s for s in run.systems if s.key.startswith("st_fp16")]
    served = [s for s in run.systems if s.key.startswith("triton") and s.peak()]
    if not baselines or not served:
        return ["## Target", "", "Not evaluated: a system was not measured (see the log).", ""]
    st = max(baselines, key=lambda s: s.levels[0].throughput)
    lines = [
        "## Target",
        "",
        f"Goal: served ≥ 1.0× in-process {st.name} "
        f"({st.levels[0].throughput:.0f} texts/s, the best sentence-transformers batch).",
        "",
    ]
    for s in served:
        peak = s.peak()
        ratio = peak.throughput / st.levels[0].throughput
        verdict = "met" if ratio >= 1.0 else f"missed by {100 * (1 - ratio):.0f} %"
        lines.append(
            f"- {s.name}: {peak.throughput:.0f} texts/s at c={peak.concurrency}: "
            f"**{ratio:.2f}×** ({verdict})."
        )
    return [*lines, ""]


def header(run: Run) -> list[str]:
    """Title, machine, software, inputs and load."""
    m = run.machine
    mode = "quick mode: proves the harness runs" if run.quick else "full mode"
    return [
        "# GPU benchmark: text_embedding (torch_gpu config set) vs sentence-transformers",
        "",
        f"Run {run.started} ({mode}).",
        "",
        f"- **GPU:** {m['gpu']}; host {m['cpu']}, {m['cores']} cores, {m['memory']}.",
        f"- **Software:** PyTorch {m['torch']}, sentence-transformers "
        f"{m['sentence-transformers']}, numpy {m['numpy']}, Python {m['python']}; tritonserver "
        f"{m['tritonserver']}; tritonclient {m['tritonclient']} (perf_analyzer).",
        *[f"- **{k}:** {v}" for k, v in run.inputs.items()],
        f"- **Load:** perf_analyzer, gRPC, closed loop ({run.settings['window']}); one text per "
        f"request at c = {run.settings['single']}, {BULK_TEXTS} texts per request at c = "
        f"{run.settings['bulk']}. Throughput is texts/s for every row.",
        "",
    ]


def write_report(run: Run, out: Path) -> Path:
    """``report.md`` (machine, target, tables) and the plots."""
    out.mkdir(parents=True, exist_ok=True)
    run.save(out / "results.json")
    levels = sorted({m.concurrency for s in run.systems for m in s.levels if m.concurrency})
    lines = [
        *header(run),
        *summary(run),
        *report.summary_table(run.systems, "texts/s", levels),
        "",
        *report.detail_table(run.systems),
        "",
    ]
    for path in report.plot(run.systems, WORKLOAD, out):
        lines += [f"![{path.stem}]({path.name})", ""]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few seconds per system")
    parser.add_argument("--output", type=Path, default=BUILD_DIR / "bench-gpu")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print(
            "error: no CUDA GPU visible to PyTorch; run `make bench-gpu` on a GPU host",
            file=sys.stderr,
        )
        return 2
    knobs = QUICK if args.quick else FULL
    out = args.output
    out.mkdir(parents=True, exist_ok=True)
    texts = inputs.texts(knobs["texts"])
    run = Run(
        started=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        quick=args.quick,
        machine=machine.facts() | gpu_facts(),
        settings={
            "single": list(knobs["single"]),
            "bulk": list(knobs["bulk"]),
            "window": knobs["window"].describe(),
        },
        inputs={"texts": f"{len(texts)} real mixed texts (tritonrepo.text.corpus, eval split)"},
    )
    run.systems, reference = in_process(texts)
    for s in run.systems:
        print(f"{s.name}: {s.levels[0].throughput:.0f} texts/s {s.accuracy}", flush=True)
    options = ServerOptions(
        models=(spec.ENSEMBLE,),
        http_port=free_port(),
        grpc_port=free_port(),
        metrics_port=free_port(),
        model_config_name="torch_gpu",
        log_file=out / "tritonserver.log",
    )
    try:
        with TritonServer(options) as server:
            run.systems += served(server, texts, reference, knobs, out)
    finally:
        path = write_report(run, out)
    print("\n".join(summary(run)))
    print(f"report: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
