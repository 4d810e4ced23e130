"""Dynamic-batching gain of ``text_embedding``, measured with perf_analyzer.

One run of this script: start the embedded server (the project's launcher), check the
ensemble's outputs against sentence-transformers on the benchmark sentences (perf_analyzer does
not look at outputs), then run perf_analyzer over gRPC at concurrency 1 (the baseline: no
batching possible) and at ``--concurrency`` N on the same sentences, and report

* throughput (inferences/s) and p50/p99 latency (ms) at each concurrency,
* the gain = throughput(N) / throughput(1) — a ratio, so machine noise cancels,
* the encoder's average executed batch size at concurrency N (server statistics).

Results go to ``build/bench/text_embedding_batching.json``. perf_analyzer 2.51 (shipped in
the tritonclient wheel) needs Debian's ``libb64-0d`` and ``libcudart.so.12``
(``nvidia-cuda-runtime-cu12``); ``make bench`` provides both.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from tritonrepo.launcher import ServerOptions, TritonServer, free_port
from tritonrepo.paths import BUILD_DIR
from tritonrepo.text import spec
from tritonrepo_client import EmbeddingClient

SENTENCES = [
    "A man is eating food.",
    "The quick brown fox jumps over the lazy dog.",
    "Dynamic batching joins requests from many clients into one batch.",
    "Stocks fell sharply after the central bank raised interest rates.",
    "Please restart the router and try again in five minutes.",
    "She sells sea shells by the sea shore.",
    "Café au lait and crème brûlée for dessert.",
    "In 1969, Apollo 11 landed on the Moon.",
]


def perf_analyzer_env() -> dict[str, str]:
    """Environment with ``libcudart.so.12`` from the nvidia-cuda-runtime-cu12 wheel."""
    import nvidia.cuda_runtime

    lib = Path(next(iter(nvidia.cuda_runtime.__path__))) / "lib"
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join([str(lib), env.get("LD_LIBRARY_PATH", "")])
    return env


def check_outputs(url: str) -> float:
    """Min cosine of the served embeddings vs sentence-transformers on SENTENCES.

    Raises:
        SystemExit: below 0.9999 — a throughput of wrong answers means nothing.
    """
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(str(spec.source_model_dir()), device="cpu")
    expected = reference.encode(SENTENCES, normalize_embeddings=True)
    with EmbeddingClient(url, "grpc") as client:
        got = client.embed(SENTENCES)
    worst = float((got * expected).sum(axis=1).min())
    if worst < 0.9999:
        raise SystemExit(f"outputs are wrong (min cosine {worst:.6f}); not benchmarking")
    return worst


def run_perf_analyzer(url: str, concurrency: int, workdir: Path, interval_ms: int) -> dict:
    """One perf_analyzer measurement; returns throughput (infer/s) and latencies (ms)."""
    data = workdir / "input.json"
    data.write_text(
        json.dumps({"data": [{"TEXT": {"content": [s], "shape": [1]}} for s in SENTENCES]})
    )
    report = workdir / f"c{concurrency}.csv"
    cmd = [
        shutil.which("perf_analyzer") or str(Path(sys.executable).parent / "perf_analyzer"),
        "-m", spec.ENSEMBLE, "-u", url, "-i", "grpc", "-b", "1",
        "--input-data", str(data),
        "--concurrency-range", str(concurrency),
        "--measurement-interval", str(interval_ms),
        "--stability-percentage", "25", "--max-trials", "8",
        "-f", str(report),
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, env=perf_analyzer_env())
    if out.returncode != 0:
        raise SystemExit(f"perf_analyzer failed: {(out.stderr or out.stdout).strip()[-500:]}")
    row = next(csv.DictReader(report.open()))
    return {
        "concurrency": concurrency,
        "throughput_infer_per_s": float(row["Inferences/Second"]),
        "p50_latency_ms": float(row["p50 latency"]) / 1e3,
        "p99_latency_ms": float(row["p99 latency"]) / 1e3,
    }


def encoder_batches(server: TritonServer) -> dict[int, int]:
    """{executed batch size: count} of the encoder so far."""
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(server.options.http_url)
    try:
        stats = client.get_inference_statistics(spec.ENCODER_MODEL)["model_stats"][0]
    finally:
        client.close()
    return {int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in stats["batch_stats"]}


def average_batch(before: dict[int, int], after: dict[int, int]) -> float:
    """Mean executed batch size between two :func:`encoder_batches` snapshots."""
    runs = {size: after[size] - before.get(size, 0) for size in after}
    executions = sum(runs.values())
    return sum(size * n for size, n in runs.items()) / executions if executions else 0.0


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print a summary; exit non-zero if it could not run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--interval-ms", type=int, default=4000, help="measurement window")
    args = parser.parse_args(argv)
    workdir = BUILD_DIR / "bench"
    workdir.mkdir(parents=True, exist_ok=True)
    options = ServerOptions(
        http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
        log_file=workdir / "tritonserver.log",
    )  # fmt: skip
    with TritonServer(options) as server:
        cosine = check_outputs(options.grpc_url)
        baseline = run_perf_analyzer(options.grpc_url, 1, workdir, args.interval_ms)
        before = encoder_batches(server)
        loaded = run_perf_analyzer(options.grpc_url, args.concurrency, workdir, args.interval_ms)
        loaded["encoder_average_batch"] = average_batch(before, encoder_batches(server))
    result = {
        "model": spec.ENSEMBLE,
        "config": "cpu",
        "cpu_count": os.cpu_count(),
        "min_cosine_vs_sentence_transformers": cosine,
        "baseline": baseline,
        "loaded": loaded,
        "throughput_gain": loaded["throughput_infer_per_s"] / baseline["throughput_infer_per_s"],
    }
    (workdir / "text_embedding_batching.json").write_text(json.dumps(result, indent=2) + "\n")
    for r in (baseline, loaded):
        print(
            f"concurrency {r['concurrency']:>3}: {r['throughput_infer_per_s']:8.1f} infer/s  "
            f"p50 {r['p50_latency_ms']:7.1f} ms  p99 {r['p99_latency_ms']:7.1f} ms"
        )
    print(
        f"encoder average batch at concurrency {args.concurrency}: "
        f"{loaded['encoder_average_batch']:.1f}"
    )
    print(
        f"dynamic batching gain: {result['throughput_gain']:.2f}x throughput "
        f"(outputs checked: min cosine {cosine:.6f})"
    )
    return 0


if __name__ == "__main__":
    np.set_printoptions(precision=4)
    sys.exit(main())
