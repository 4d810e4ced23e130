"""``make bench-pipelines``: what a described pipeline costs its author and what serving it gives.

Usage: ``python -m benchmarks.pipelines [--pipeline NAME ...] [--seconds S]
[--out build/bench/pipelines]``

For each described pipeline (``pipelines/<name>/pipeline.toml``; default: every stateless one
with a built core, i.e. ``breast_cancer``, ``nudenet_detector`` and ``click_lightgbm``) one run
measures, on the same sample rows (the description's own ``samples()``):

1. **Lines the user wrote:** non-blank, non-comment lines of ``pipeline.toml`` and of the
   folder's ``.py`` files except ``check_*.py`` and ``__init__.py``; docstring lines are counted
   apart from code lines.
2. **Description to first served answer**, phase by phase (nothing in the checkout is deleted or
   written): ``python -m builders.pipeline.generate pipeline NAME --check`` (parse, every check,
   render every file, compare: generation minus the file writes), copying the generated model
   folders (configs and step ``model.py``, no ``model.onnx``) into a fresh temporary repository,
   ``python -m builders.pipeline.build NAME --repository TMP`` (so the core model is really
   built and parity-checked there), the launcher starting a server with only that pipeline
   until READY (the launcher's READY includes a probe inference), and the first ``infer``
   of a new HTTP client. The subprocess phases include the interpreter's start, as a user
   running them pays it.
3. **Served vs in-process**, one item per request: the served pipeline (that fresh server, CPU
   configs: the one-step model of ``configs/cpu.pbtxt``; HTTP through the HTTP guard as the
   launcher serves by default, and Triton's own HTTP endpoint behind it, for the guard's cost),
   driven by ``wrk`` (:mod:`benchmarks.harness.wrk`, C: a few per cent of a core) with KServe v2
   bodies
   built once per sample row, and the same pipeline in this
   process (the description's preprocess → one shared ONNX Runtime session on the checkout's
   built ``model.onnx`` → postprocess, as ``tests.pipeline_suite.in_process`` does) at
   concurrency 1 and 16 (Python threads, closed loop: ``benchmarks.harness.loadgen``), plus
   in-process
   with the best batch of a short sweep as the reference ceiling. Outputs are checked before
   timing (served = in-process = the test suite's ``in_process`` on every sample row, through
   ``PipelineClient``). The server is stopped before the in-process rows run, so they do not
   share the two cores.
4. **Served vs FastAPI**: the same pipeline as the FastAPI service a user would write (one
   route, JSON body, gunicorn with 1, 2 and one-per-core uvicorn workers, each layout alone;
   :mod:`benchmarks.pipelines.vs_fastapi`), answers checked on every sample row, driven by the
   same ``wrk`` at the same concurrency levels; the report states served c=16 throughput and
   c=1 p50 against the best layout.

Writes ``report.md`` (the tables) and ``results.json`` into ``--out``. Ratios are served over
in-process from this run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

import numpy as np

from benchmarks.harness import loadgen, machine, wrk
from benchmarks.harness.foreign_load import ForeignLoad
from benchmarks.harness.loadgen import Measurement
from benchmarks.pipelines.first_answer import copy_generated, server_options, timed_command
from benchmarks.pipelines.lines import user_lines
from benchmarks.pipelines.report import report
from benchmarks.pipelines.served import (
    BATCHES,
    CONCURRENCY,
    TRIALS,
    WARMUP_S,
    Result,
    Row,
    TimedInProcess,
    batch_of,
    check_outputs,
    kserve_body,
    local_caller,
    rows_of,
    timed_batches,
)
from benchmarks.pipelines.vs_fastapi import (
    SERVED,
    SERVED_NO_GUARD,
    comparison,
    measure_fastapi,
)
from tritonrepo.description import import_ref, load
from tritonrepo.paths import BUILD_DIR, MODEL_REPOSITORY, PIPELINES, REPO_ROOT

DEFAULT_PIPELINES = ("breast_cancer", "nudenet_detector", "click_lightgbm")


def measure_pipeline(name: str, seconds: float, out: Path, say: Callable[[str], None]) -> Result:
    """Points 1-3 of the module docstring for one pipeline; every server started is stopped.

    Raises:
        SystemExit: a phase failed or outputs differ (the message says which).
    """
    from tests.pipeline_suite import in_process as suite_in_process
    from tritonrepo.server.launcher import TritonServer
    from tritonrepo_client import PipelineClient

    pipeline = load(PIPELINES / name / "pipeline.toml")
    if pipeline.core.builder is not None:
        raise SystemExit(f"{name}: its core is built by its own builder, not described")
    samples = dict(import_ref(pipeline.samples)())
    requests = rows_of(samples)
    model_file = MODEL_REPOSITORY / pipeline.core.model / str(pipeline.core.versions[0])
    model_file = model_file / "model.onnx"
    if not model_file.is_file():
        raise SystemExit(f"{model_file} is missing: run `make artifacts`")
    local = TimedInProcess(pipeline, model_file)
    want = local(samples)
    check_outputs(want, suite_in_process(pipeline, samples), f"{name}: shared session vs suite")
    result = Result(name, pipeline.summary, len(requests), user_lines(pipeline), {})
    phases = result.phases_s

    phases_load = ForeignLoad().__enter__()
    say(f"{name}: generate --check")
    phases["generate --check"] = timed_command(
        ["-m", "builders.pipeline.generate", "pipeline", name, "--check"],
        out / f"{name}.generate.log",
    )
    with tempfile.TemporaryDirectory(prefix=f"bench-{name}-") as tmp:
        repository = Path(tmp) / "model_repository"
        started = time.perf_counter()
        copy_generated(pipeline, repository)
        phases["copy generated files"] = time.perf_counter() - started
        say(f"{name}: build (fresh, into {repository})")
        phases["build core model"] = timed_command(
            ["-m", "builders.pipeline.build", name, "--repository", str(repository)],
            out / f"{name}.build.log",
        )
        if not (
            repository / pipeline.core.model / str(pipeline.core.versions[0]) / "model.onnx"
        ).is_file():
            raise SystemExit(f"{name}: the build wrote no model.onnx into {repository}")
        say(f"{name}: server start")
        options = server_options(out / f"{name}.tritonserver.log", repository, (name,))
        options.http_guard = True  # as the launcher serves by default
        server = TritonServer(options)
        started = time.perf_counter()
        server.start()
        try:
            phases["server start to READY"] = time.perf_counter() - started
            started = time.perf_counter()
            with PipelineClient(name, options.http_url, "http") as client:
                first = client.infer(requests[0])
                phases["first infer"] = time.perf_counter() - started
                check_outputs(first, {k: np.asarray(v)[:1] for k, v in want.items()}, "row 0")
                for i, request in enumerate(requests):
                    got = client.infer(request)
                    check_outputs(
                        got,
                        {k: np.asarray(v)[i : i + 1] for k, v in want.items()},
                        f"{name}: served row {i}",
                    )
            result.checks = (
                f"served (fresh build) = in-process = tests.pipeline_suite.in_process on all "
                f"{len(requests)} sample rows (atol/rtol 1e-5, BYTES equal)"
            )
            bodies = [kserve_body(request, pipeline) for request in requests]
            ports = ((SERVED, options.http_port), (SERVED_NO_GUARD, server.triton_http_port))
            for system, port in ports:
                for level in CONCURRENCY:
                    say(f"{name}: {system} c={level}")
                    with ForeignLoad() as load_:
                        m = wrk.run(port, f"/v2/models/{name}/infer", bodies, level, seconds,
                                    WARMUP_S, TRIALS[level])  # fmt: skip
                    result.rows.append(Row.of(system, m, load_, notes="KServe v2 JSON, wrk"))
        finally:
            server.stop()
    phases["total"] = sum(phases.values())
    phases_load.__exit__()
    result.phases_foreign_cpu = phases_load.share

    result.rows += measure_fastapi(pipeline, requests, want, seconds, out, say)
    result.checks += "; every FastAPI layout = in-process on every sample row"

    local.timing = True
    for _ in range(3):
        for request in requests:
            local(request)
    calls = 3 * len(requests)
    result.stage_ms_batch1 = {k: v / calls * 1e3 for k, v in local.stage_s.items()}
    local.timing = False
    for level in CONCURRENCY:
        say(f"{name}: in-process c={level}")
        with ForeignLoad() as load_:
            m = loadgen.run_closed_loop(local_caller(local), requests, level, seconds, WARMUP_S)
        result.rows.append(Row.of("in-process (1 shared ORT session)", m, load_))
    sweep_s = max(1.0, seconds / 4)
    best: tuple[float, Measurement | None, int, ForeignLoad | None] = (0.0, None, 1, None)
    for size in [b for b in BATCHES if b <= pipeline.max_batch_size]:
        say(f"{name}: in-process batch {size}")
        batches = [batch_of(samples, size, start) for start in range(len(requests))]
        with ForeignLoad() as load_:
            m = timed_batches(local, batches, sweep_s)
        result.batch_sweep[size] = m.throughput * size
        if m.throughput * size > best[0]:
            best = (m.throughput * size, m, size, load_)
    _, m, size, load_ = best
    assert m is not None and load_ is not None
    result.rows.append(
        Row.of(f"in-process, best batch ({size})", m, load_, size, "latency per batch call")
    )
    return result


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.pipelines", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--pipeline",
        action="append",
        help="repeatable (default: " + ", ".join(DEFAULT_PIPELINES) + ")",
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="per measurement (10)")
    parser.add_argument("--out", type=Path, default=BUILD_DIR / "bench" / "pipelines")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; exit 1 with a one-line reason when a pipeline cannot be measured."""
    args = parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    clock = time.monotonic()
    lock = threading.Lock()

    def say(what: str) -> None:
        with lock:
            print(f"[{time.monotonic() - clock:6.1f} s] {what}", file=sys.stderr, flush=True)

    results = []
    try:
        for name in args.pipeline or DEFAULT_PIPELINES:
            results.append(measure_pipeline(name, args.seconds, out, say))
    except SystemExit as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    facts = machine.facts()
    (out / "results.json").write_text(
        json.dumps(
            {
                "started": started,
                "seconds": args.seconds,
                "machine": facts,
                "results": [asdict(r) for r in results],
                "served_vs_fastapi": [e for r in results for e in comparison(r.pipeline, r.rows)],
            },
            indent=1,
        )
        + "\n"
    )
    text = report(results, facts, args.seconds, started)
    (out / "report.md").write_text(text)
    print(text)
    say(f"done: {out / 'report.md'}, {out / 'results.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
