"""``make bench-text-serve``: ``text_embedding`` as ``make serve`` serves it, against
sentence-transformers in this process, and what the rest of ``make serve`` costs it.

Usage: ``python -m benchmarks.serving.text_serve [--texts 150] [--concurrency 16]``

On the same held-out texts (the eval split, mixed lengths: :func:`benchmarks.harness.inputs.texts`):

1. sentence-transformers in this process, ``encode(batch_size=32)`` (its own length sort), the
   reference and the baseline, measured twice, the faster kept;
2. ``tritonrepo-serve`` started as ``make serve`` starts it (every default model, HTTP and gRPC
   guards, self-healing every 10 s), and ``perf_analyzer`` over gRPC at ``--concurrency``, one
   text per request (:mod:`benchmarks.harness.perf_analyzer`);
3. the same with ``--model text_embedding`` (the idle pipelines' cost), with
   ``--heal-interval 0`` (the probes' cost) and with ``--no-grpc-guard`` (the gRPC guard's).

Each row's texts/s and its ratio to (1); the answers of the served pipeline are checked against
(1) first (min cosine over every text, :data:`MIN_COSINE`). The server is stopped before the
next starts, and the in-process rows run with no server up.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmarks.harness import inputs, perf_analyzer
from tritonrepo.paths import BUILD_DIR, REPO_ROOT
from tritonrepo.text import spec

MIN_COSINE = 0.9999  # served FP32 against sentence-transformers
VARIANTS = {
    "make serve (every default model, guards, healing)": [],
    "--model text_embedding": ["--model", spec.ENSEMBLE],
    "make serve, --heal-interval 0": ["--heal-interval", "0"],
    "--model text_embedding --no-grpc-guard": ["--model", spec.ENSEMBLE, "--no-grpc-guard"],
}


def in_process(texts: list[str]) -> tuple[float, np.ndarray]:
    """sentence-transformers' texts/s at batch 32 (best of two) and its embeddings FP32
    ``[n, 384]``."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(spec.source_model_dir()), device="cpu")
    model.encode(texts[:32], batch_size=32)
    best = 0.0
    reference = np.zeros((0,))
    for _ in range(2):
        started = time.perf_counter()
        reference = model.encode(texts, batch_size=32, normalize_embeddings=True)
        best = max(best, len(texts) / (time.perf_counter() - started))
    return best, np.asarray(reference, dtype=np.float32)


def _ports() -> list[str]:
    from tritonrepo.server.launcher import free_port

    ports: list[int] = []
    for _ in range(4):
        ports.append(free_port(avoid=ports))
    names = ("--http-port", "--grpc-port", "--metrics-port", "--heal-metrics-port")
    return [a for name, port in zip(names, ports, strict=True) for a in (name, str(port))]


def served(args: list[str], texts: list[str], reference: np.ndarray, concurrency: int,
           log: Path) -> float:  # fmt: skip
    """Texts/s of ``tritonrepo-serve ARGS`` over gRPC at ``concurrency`` (perf_analyzer).

    Raises:
        RuntimeError: the server did not become ready, answered wrong, or perf_analyzer failed.
    """
    from tritonrepo_client import EmbeddingClient

    ports = _ports()
    grpc = f"127.0.0.1:{ports[ports.index('--grpc-port') + 1]}"
    command = [sys.executable, "-m", "tritonrepo.server.serve", *ports, "--no-repository-key",
               "--log-file", str(log.with_suffix(".tritonserver.log")), *args]  # fmt: skip
    with open(log, "w") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=REPO_ROOT)
    try:
        deadline = time.monotonic() + 300
        while "ready:" not in log.read_text():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"tritonrepo-serve {' '.join(args)} did not start: see {log}")
            time.sleep(0.5)
        with EmbeddingClient(grpc, "grpc") as client:
            got = client.embed(texts)
        norms = np.linalg.norm(got, axis=1) * np.linalg.norm(reference, axis=1)
        cosine = float(((got * reference).sum(axis=1) / norms).min())
        if cosine < MIN_COSINE:
            raise RuntimeError(f"served embeddings are off: min cosine {cosine:.6f}")
        with tempfile.TemporaryDirectory(prefix="text-serve-") as tmp:
            data = inputs.write_text_data(Path(tmp) / "texts.json", texts)
            level = perf_analyzer.run_level(
                spec.ENSEMBLE, grpc, data, concurrency, Path(tmp) / "report.csv",
                perf_analyzer.Window(interval_ms=5000),
            )  # fmt: skip
        return level.measurement.throughput
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()


def main(argv: Sequence[str] | None = None) -> int:
    """Measure every row; print them with their ratio to sentence-transformers."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.serving.text_serve",
                                     description=__doc__.split("\n")[0])  # fmt: skip
    parser.add_argument("--texts", type=int, default=150)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--variant", action="append", choices=list(VARIANTS),
                        help="repeatable (default: every one)")  # fmt: skip
    args = parser.parse_args(argv)
    texts = inputs.texts(args.texts)
    baseline, reference = in_process(texts)
    lines = Path("/proc/cpuinfo").read_text().splitlines()
    cpu = next((ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name")), "?")
    print(f"{len(texts)} held-out texts, {os.cpu_count()} cores ({cpu}); sentence-transformers "
          f"in process, batch 32: {baseline:.1f} texts/s")  # fmt: skip
    out = BUILD_DIR / "bench"
    out.mkdir(parents=True, exist_ok=True)
    for k, name in enumerate(args.variant or VARIANTS):
        log = out / f"text-serve-{k}.log"
        try:
            rate = served(VARIANTS[name], texts, reference, args.concurrency, log)
        except RuntimeError as exc:
            print(f"error: {name}: {exc}", file=sys.stderr)
            return 1
        print(f"{name}: {rate:.1f} texts/s, {rate / baseline:.2f}x", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
