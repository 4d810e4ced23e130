"""``make bench-gpu``'s text rows over HTTP/JSON: the served ``text_embedding`` against the
embedding server a team would deploy instead (:mod:`benchmarks.ensembles.embedding_server`,
infinity-emb),
one text per request, the same texts from the same load generator (:mod:`benchmarks.gpu.load`:
``wrk`` when the host has it) at the same concurrency levels, on the same GPU.

Before timing, each system embeds the run's texts and its min cosine to sentence-transformers
FP32 must reach the FP16 gate (``builders.gates.accuracy_gate.TOLERANCES``; the cosine, not the
scale, is compared). The two are timed one
after the other, each alone on the GPU: Triton's rows while its server is up, infinity-emb's
after it stopped.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from benchmarks.ensembles import embedding_server
from benchmarks.ensembles.text_embedding import min_cosine, require
from benchmarks.gpu.load import Target, timed_levels
from benchmarks.harness.results import System
from builders.gates.accuracy_gate import TOLERANCES
from tritonrepo.server.launcher import TritonServer, free_port
from tritonrepo.text import spec

WORKLOAD = "text_embedding"
LEVELS = (1, 64, 256)  # c=64 and c=256: where the served model must lead
QUICK_LEVELS = (1, 16)
SECONDS, QUICK_SECONDS = 10.0, 3.0
TRITON_KEY, INFINITY_KEY = "triton_gpu_http", "infinity_http"


def triton_body(text: str) -> dict:
    """One text as a KServe v2 JSON request to ``text_embedding``."""
    return {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1, 1], "data": [text]}]}


def _levels(quick: bool) -> tuple[tuple[int, ...], float]:
    return (QUICK_LEVELS, QUICK_SECONDS) if quick else (LEVELS, SECONDS)


def triton_rows(server: TritonServer, texts: list[str], cosine: float, quick: bool) -> System:
    """The served model over HTTP/JSON (its answers were checked by the caller: ``cosine``)."""
    levels, seconds = _levels(quick)
    target = Target(server.options.http_port, f"/v2/models/{spec.ENSEMBLE}/infer", triton_body)
    done, note, _ = timed_levels(target, texts, levels, seconds, 2.0, "Triton HTTP")
    return System(
        WORKLOAD, TRITON_KEY, "Triton text_embedding, torch_gpu, HTTP/JSON, 1 text/request",
        "wrk", f"min cos {cosine:.5f}", done, note, {"min_cosine": cosine},
    )  # fmt: skip


def infinity_rows(texts: list[str], reference: np.ndarray, quick: bool, out: Path) -> System:
    """infinity-emb on the same GPU, or a row that says why it was not measured.

    Raises:
        SystemExit: its min cosine is below the FP16 gate
            (:func:`benchmarks.ensembles.text_embedding.require`).
        RuntimeError: it is installed but did not start (:func:`embedding_server.infinity`).
    """
    name = "infinity-emb (torch engine, FP16, batch 32), HTTP/JSON, 1 text/request"
    why = embedding_server.installed()
    if why:
        return System(WORKLOAD, INFINITY_KEY, name, "wrk", notes=f"not measured: {why}")
    levels, seconds = _levels(quick)
    port = free_port()
    with embedding_server.infinity(spec.source_model_dir(), port, out / "infinity.log"):
        cosine = min_cosine(embedding_server.embed(port, texts), reference)
        require("infinity-emb", cosine, TOLERANCES["fp16"].min_cosine)
        target = Target(port, embedding_server.PATH, embedding_server.body)
        done, note, _ = timed_levels(target, texts, levels, seconds, 2.0, "infinity-emb")
    return System(
        WORKLOAD, INFINITY_KEY, f"{name}, version {embedding_server.version()}", "wrk",
        f"min cos {cosine:.5f}", done, note, {"min_cosine": cosine},
    )  # fmt: skip


def summary(systems: list[System]) -> list[str]:
    """The served model against infinity-emb at each level both measured, c=64 and c=256
    required ahead (ratio > 1), with p99 beside."""
    served = next((s for s in systems if s.key == TRITON_KEY), None)
    other = next((s for s in systems if s.key == INFINITY_KEY), None)
    if served is None or other is None:
        return []
    if not other.levels:
        return [f"- Against infinity-emb: {other.notes}"]
    lines = []
    for level in sorted({m.concurrency for m in served.levels}):
        mine, theirs = served.at(level), other.at(level)
        if mine is None or theirs is None or not theirs.throughput:
            continue
        ratio = mine.throughput / theirs.throughput
        goal = " (goal: ahead, > 1.0×: " + ("met)" if ratio > 1 else "missed)")
        lines.append(
            f"- HTTP/JSON at c={level}: served {mine.throughput:.0f} vs infinity-emb "
            f"{theirs.throughput:.0f} texts/s: **{ratio:.2f}×**"
            f"{goal if level in LEVELS[1:] else ''}; p99 {mine.p99_ms:.1f} vs "
            f"{theirs.p99_ms:.1f} ms."
        )
    return lines
