"""``make bench-gpu``'s text section: ``text_embedding`` (torch_gpu config set) against what it
replaces, on the same GPU, in one run, on the same texts.

Systems:

* sentence-transformers FP16 in one process at several batch sizes (the baseline is the best of
  them) and FP32 (the accuracy reference), and HF ``tokenizers`` alone, which bounds a one-process
  pipeline on the host;
* the served model (in the torch_gpu set one Python model on the GPU: tokenize, encoder and
  normalise in one execute, ``one_step_gpu``), driven by perf_analyzer over gRPC with one text per
  request and with 64 texts per request (its ``max_batch_size``, how bulk clients send), across
  concurrency levels, with the per-step table of where each request's time goes
  (:mod:`benchmarks.harness.step_table`; the steps are the models Triton runs: the one-step model,
  or the
  ensemble's three);
* over HTTP/JSON from ``wrk``, the served model and infinity-emb, the embedding server a team
  would deploy instead (:mod:`benchmarks.gpu.text_http`).

Interface for :mod:`benchmarks.gpu.run`: :func:`text_section`, :func:`text_summary`, and the
constants its header quotes.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np

from benchmarks.ensembles.text_embedding import STEPS, min_cosine, require
from benchmarks.gpu import text_http as gpu_text_http
from benchmarks.harness import inputs, step_table
from benchmarks.harness.loadgen import Measurement
from benchmarks.harness.perf_analyzer import Window
from benchmarks.harness.results import IN_PROCESS, Run, System
from benchmarks.harness.triton_side import sweep_steps
from builders.gates.accuracy_gate import TOLERANCES
from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.server.launcher import ServerOptions, TritonServer, free_port
from tritonrepo.text import spec
from tritonrepo.text.tokenization import TextTokenizer
from tritonrepo_client import EmbeddingClient
from tritonrepo_client.control.repository import RepositoryClient
from tritonrepo_format.config_sets import TORCH_GPU_SET

WORKLOAD = "text_embedding"
ST_BATCHES = (32, 128, 512)
SINGLE_LEVELS = (1, 16, 64, 256)  # the per-step table's levels: idle, moderate, saturated
BULK_LEVELS = (1, 4, 16)
BULK_TEXTS = spec.MAX_BATCH_SIZE  # texts per bulk request: the ensemble's max_batch_size
QUICK = {"texts": 512, "single": (1, 16), "bulk": (1, 4), "window": Window(1000, 999, 3)}
FULL = {"texts": 2048, "single": SINGLE_LEVELS, "bulk": BULK_LEVELS, "window": Window(1000, 25, 4)}
# Bounds the one-text rows are checked against in summary(): p50 at c=1 (ms) and the bulk ratio.
# Bounds the one-text rows are checked against in text_summary(): texts/s at the peak, p50 at
# c=1 (ms), and the bulk ratio to the best sentence-transformers batch.
SINGLE_GOAL = 10_000
C1_P50_GOAL_MS = 3.0
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


def served_steps(server: TritonServer) -> tuple[str, ...]:
    """The models Triton runs for text_embedding in the server's set: the ensemble's three steps,
    or text_embedding itself when it is one model (``one_step_gpu``)."""
    o = server.options
    with RepositoryClient(o.http_url, "http", key=o.repository_key or "") as repo:
        config = repo.config(spec.ENSEMBLE)
    return STEPS if config.get("platform") == "ensemble" else (spec.ENSEMBLE,)


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
    watch = served_steps(server)
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
            server, spec.ENSEMBLE, data, levels, knobs["window"], workdir, watch, batch_size=batch
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


def text_summary(systems: list[System]) -> list[str]:
    """The text comparisons, each with its measured value, bound and verdict: one text per
    request at its peak ≥ ``SINGLE_GOAL`` texts/s and ≥ 1.0× the best sentence-transformers FP16
    batch, p50 at c=1 ≤ ``C1_P50_GOAL_MS``, ``BULK_TEXTS`` texts per request ≥ ``BULK_GOAL``×,
    served min cosine ≥ 0.999, and ahead of infinity-emb over HTTP at c=64 and c=256
    (:func:`benchmarks.gpu.text_http.summary`)."""
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
    short = f"{100 * (1 - peak.throughput / SINGLE_GOAL):.0f} %"
    lines.append(
        f"- {single.name}: {peak.throughput:.0f} texts/s at c={peak.concurrency} (goal ≥ "
        f"{SINGLE_GOAL:,}: {verdict(peak.throughput >= SINGLE_GOAL, short)}): "
        f"**{ratio:.2f}×** the best in-process batch (goal ≥ 1.0×: "
        f"{verdict(ratio >= 1.0, f'{100 * (1 - ratio):.0f} %')})."
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
    return [*lines, *gpu_text_http.summary(systems), ""]


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
        model_config_name=TORCH_GPU_SET,
        log_file=out / "tritonserver.log",
    )
    quick = knobs is QUICK
    with TritonServer(options) as server:
        systems, tables = served(server, texts, reference, knobs, out)
        cosine = systems[0].values["min_cosine"]
        systems.append(gpu_text_http.triton_rows(server, texts, cosine, quick))
    run.systems += systems
    run.settings["step_tables"] = tables
    run.systems.append(gpu_text_http.infinity_rows(texts, reference, quick, out))
