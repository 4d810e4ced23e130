"""``make bench-smoke`` (run by CI after the tests): a speed regression of the request path
cannot land unnoticed.

Usage: ``python -m benchmarks.serving.ratio_smoke [--pipeline click_lightgbm] [--seconds 3]``

On one server in one run, a small described pipeline (default ``click_lightgbm``: one row per
request, a one-step CPU model) is driven by ``wrk`` (:mod:`benchmarks.harness.wrk`) at concurrency
16,
one row per request, through:

1. the HTTP guard, as ``tritonrepo-serve`` serves it by default;
2. Triton's own HTTP port behind it (the same server, the same request bodies);
3. the FastAPI service a user would write (:mod:`benchmarks.pipelines.fastapi_service`: gunicorn
with one
   uvicorn worker per core), after the server has stopped.

Guard and direct alternate, :data:`ROUNDS` windows each, and the best window of each counts (a
busy CI machine slows one window, not every one). The ratios are printed in one line each;
the exit status is 1 only for a gross regression: the guard under :data:`MIN_GUARD_RATIO` of
Triton's own throughput, or the served pipeline under :data:`MIN_FASTAPI_RATIO` of the FastAPI
service's. The margins are wide on purpose (a quiet 2-core machine measured 0.75-0.85× and
1.6-1.9×; a guard that read a missing file per request measured 0.20×), so a busy machine does
not fail it: this is not a benchmark (``make bench-pipelines`` is), it catches what a benchmark
run nobody made would have shown.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmarks.harness import wrk
from benchmarks.pipelines.fastapi_service import PipelineFastApi, request_json
from benchmarks.pipelines.served import kserve_body, rows_of
from tritonrepo.description import import_ref, load
from tritonrepo.paths import BUILD_DIR, PIPELINES, REPO_ROOT

PIPELINE = "click_lightgbm"
CONCURRENCY = 16
ROUNDS = 2  # windows per system; the best counts
MIN_GUARD_RATIO = 0.5  # guard / Triton's own HTTP port, c=16 throughput, at least
MIN_FASTAPI_RATIO = 0.8  # served (guard) / FastAPI, c=16 throughput, at least
WARMUP_S = 1.0


def best(port: int, path: str, bodies: Sequence[tuple[bytes, dict[str, str]]], seconds: float):
    """The highest throughput (requests/s) of one ``wrk`` window at :data:`CONCURRENCY`.

    Raises:
        RuntimeError: wrk is missing, failed, or saw non-2xx answers.
    """
    m = wrk.run(port, path, bodies, CONCURRENCY, seconds, WARMUP_S)
    if m.errors:
        raise RuntimeError(f"{m.errors} answers of {path} on port {port} were not 2xx")
    return m


def measure(name: str, seconds: float, log_dir: Path) -> dict[str, float]:
    """Requests/s at c=16 of ``guard``, ``direct`` and ``fastapi`` (best windows), and the p99
    of each in ms (``*_p99_ms``).

    Raises:
        RuntimeError: a system did not start, or answered differently or with errors.
    """
    from tests.conftest import server_options
    from tritonrepo.server.launcher import TritonServer, free_port
    from tritonrepo_client import PipelineClient

    pipeline = load(PIPELINES / name / "pipeline.toml")
    requests = rows_of(dict(import_ref(pipeline.samples)()))
    served_bodies = [kserve_body(request, pipeline) for request in requests]
    path = f"/v2/models/{name}/infer"
    options = server_options(f"ratio-smoke-{name}", models=(name,), http_guard=True,
                             log_file=log_dir / f"ratio-smoke-{name}.tritonserver.log")  # fmt: skip
    windows: dict[str, list] = {"guard": [], "direct": []}
    with TritonServer(options) as server:
        with (
            PipelineClient(name, options.http_url, "http") as guarded,
            PipelineClient(name, server.triton_http_url, "http") as direct,
        ):
            a, b = guarded.infer(requests[0]), direct.infer(requests[0])
        for key in a:
            if not np.array_equal(np.asarray(a[key]), np.asarray(b[key])):
                raise RuntimeError(f"{name}: the guard changed output {key}")
        ports = {"guard": options.http_port, "direct": server.triton_http_port}
        for _ in range(ROUNDS):
            for system, port in ports.items():
                windows[system].append(best(port, path, served_bodies, seconds))
    fastapi_bodies = wrk.json_bodies([request_json(r, pipeline) for r in requests])
    workers = len(os.sched_getaffinity(0))
    log = log_dir / f"ratio-smoke-{name}.fastapi.log"
    try:
        service = PipelineFastApi(name, free_port(), workers, log).__enter__()
    except RuntimeError as exc:
        raise RuntimeError(f"the FastAPI service did not start: {exc}") from exc
    try:
        windows["fastapi"] = [
            best(service.port, f"/{name}", fastapi_bodies, seconds) for _ in range(ROUNDS)
        ]
    finally:
        service.__exit__()
    figures: dict[str, float] = {}
    for system, measured in windows.items():
        top = max(measured, key=lambda m: m.throughput)
        figures[system] = top.throughput
        figures[f"{system}_p99_ms"] = top.p99_ms
    figures["fastapi_workers"] = workers
    return figures


def verdict(figures: dict[str, float]) -> tuple[list[str], bool]:
    """The lines to print and whether every ratio clears its floor."""
    guard_ratio = figures["guard"] / figures["direct"]
    fastapi_ratio = figures["guard"] / figures["fastapi"]
    ok = guard_ratio >= MIN_GUARD_RATIO and fastapi_ratio >= MIN_FASTAPI_RATIO
    lines = [
        f"through the HTTP guard {figures['guard']:,.0f}/s (p99 {figures['guard_p99_ms']:.1f} "
        f"ms), Triton's own HTTP port {figures['direct']:,.0f}/s (p99 "
        f"{figures['direct_p99_ms']:.1f} ms): guard/direct {guard_ratio:.2f}x "
        f"(fails under {MIN_GUARD_RATIO}x)",
        f"FastAPI, gunicorn + {figures['fastapi_workers']:.0f} uvicorn workers "
        f"{figures['fastapi']:,.0f}/s (p99 {figures['fastapi_p99_ms']:.1f} ms): served/FastAPI "
        f"{fastapi_ratio:.2f}x (fails under {MIN_FASTAPI_RATIO}x)",
    ]
    return lines, ok


def main(argv: Sequence[str] | None = None) -> int:
    """Measure, print the ratios; exit 1 on a gross regression or when it cannot measure."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.serving.ratio_smoke",
                                     description=__doc__.split("\n")[0])  # fmt: skip
    parser.add_argument("--pipeline", default=PIPELINE)
    parser.add_argument("--seconds", type=float, default=3.0, help="per window (3)")
    args = parser.parse_args(argv)
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    BUILD_DIR.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ratio-smoke-", dir=BUILD_DIR) as tmp:
        try:
            figures = measure(args.pipeline, args.seconds, Path(tmp))
        except RuntimeError as exc:
            print(f"ratio smoke: error: {exc}", file=sys.stderr)
            return 1
    lines, ok = verdict(figures)
    title = (f"ratio smoke ({args.pipeline}, one row per request, wrk c={CONCURRENCY}, best of "
             f"{ROUNDS} x {args.seconds:g} s):")  # fmt: skip
    print("\n".join([title, *(f"  {line}" for line in lines)]))
    if not ok:
        print("ratio smoke: FAILED: a ratio fell below its floor (a regression of the request "
              "path; make bench-pipelines measures it)", file=sys.stderr)  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
