"""``make bench-pipelines``' FastAPI rows and the comparison with them.

:func:`measure_fastapi` serves a described pipeline as the FastAPI service a user would write
(:mod:`benchmarks.pipelines.fastapi_service`: gunicorn with 1, 2 and one-per-core uvicorn workers,
one
layout at a time, nothing else of the benchmark running), checks its answers against the
pipeline in this process on every sample row, and drives it with the same closed-loop load
generator as the served pipeline (``wrk``, :mod:`benchmarks.harness.wrk`) at the same concurrency
levels, one row per request (a JSON body built once per sample row).

:func:`comparison` puts the served pipeline next to the best FastAPI layout:

* at concurrency 16, served throughput over the highest FastAPI throughput (wanted
  :data:`C16_THROUGHPUT_RATIO` or more), with served p99 below that layout's p99;
* at concurrency 1, served p50 over the lowest FastAPI p50 (wanted :data:`C1_P50_RATIO` or less).
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import wrk
from benchmarks.harness.foreign_load import ForeignLoad
from benchmarks.pipelines.fastapi_service import (
    PipelineFastApi,
    answer_arrays,
    layouts,
    request_json,
)
from benchmarks.pipelines.served import CONCURRENCY, TRIALS, WARMUP_S, Row, check_outputs
from tritonrepo.description import Pipeline
from tritonrepo.server.launcher import free_port

C16_THROUGHPUT_RATIO = 1.5  # served / best FastAPI throughput at c=16, at least
C1_P50_RATIO = 1.3  # served / best FastAPI p50 at c=1, at most
FASTAPI = "FastAPI + ONNX Runtime, gunicorn + {} uvicorn worker{}"
# The served rows (benchmarks.pipelines.run): as the launcher serves by default (through the HTTP
# guard), and Triton's own HTTP endpoint behind the guard (the guard's cost).
SERVED = "served (HTTP guard)"
SERVED_NO_GUARD = "served, Triton's HTTP without the guard"


def _post(port: int, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """One JSON POST to 127.0.0.1:``port``; the JSON answer.

    Raises:
        SystemExit: the answer is not HTTP 200.
    """
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        answer = connection.getresponse()
        data = answer.read()
    finally:
        connection.close()
    if answer.status != 200:
        raise SystemExit(f"FastAPI {path} answered HTTP {answer.status}: {data[:200]!r}")
    return json.loads(data)


def measure_fastapi(
    pipeline: Pipeline,
    requests: Sequence[dict[str, np.ndarray]],
    want: dict[str, np.ndarray],
    seconds: float,
    out: Path,
    say: Callable[[str], None],
) -> list[Row]:
    """One :class:`Row` per FastAPI layout and concurrency level (module docstring).

    Args:
        pipeline: the description.
        requests: single-row requests, one per sample row.
        want: the in-process outputs of all sample rows (batch-first, row i = request i).
        seconds: measurement window per row (after ``WARMUP_S`` of warm-up).
        out: where the services' logs go (``<name>.fastapi-<workers>.log``).
        say: progress lines.

    Raises:
        SystemExit: a service did not start, or an answer differs from in-process.
    """
    name = pipeline.name
    bodies = [request_json(request, pipeline) for request in requests]
    prepared = wrk.json_bodies(bodies)
    rows = []
    for workers in layouts():
        system = FASTAPI.format(workers, "s" if workers > 1 else "")
        say(f"{name}: FastAPI, {workers} worker(s): start")
        log = out / f"{name}.fastapi-{workers}.log"
        try:
            service = PipelineFastApi(name, free_port(), workers, log).__enter__()
        except RuntimeError as exc:
            raise SystemExit(str(exc)) from exc
        try:
            for i, body in enumerate(bodies):
                got = answer_arrays(_post(service.port, f"/{name}", body), pipeline)
                row = {k: np.asarray(v)[i : i + 1] for k, v in want.items()}
                check_outputs(got, row, f"{name}: FastAPI ({workers} workers) row {i}")
            for level in CONCURRENCY:
                say(f"{name}: FastAPI, {workers} worker(s), c={level}")
                with ForeignLoad() as load_:
                    m = wrk.run(service.port, f"/{name}", prepared, level, seconds, WARMUP_S,
                                TRIALS[level])  # fmt: skip
                rows.append(Row.of(system, m, load_, notes="JSON body, wrk"))
        finally:
            service.__exit__()
    return rows


def comparison(pipeline: str, rows: Sequence[Row]) -> list[dict[str, Any]]:
    """The two comparisons of the module docstring for one pipeline's rows (the served rows
    are :data:`SERVED`, as the launcher serves by default): dicts with ``pipeline``,
    ``concurrency``, ``measure``, ``served``, ``fastapi`` (the layout compared with), ``ratio``,
    ``wanted`` and ``met`` (None when a row is missing)."""
    fastapi = [r for r in rows if r.system.startswith("FastAPI")]
    served = {r.concurrency: r for r in rows if r.system == SERVED}
    found = []
    fast16 = max((r for r in fastapi if r.concurrency == 16), key=lambda r: r.items_per_s,
                 default=None)  # fmt: skip
    s16 = served.get(16)
    entry: dict[str, Any] = {
        "pipeline": pipeline,
        "concurrency": 16,
        "measure": "throughput (and p99)",
        "wanted": f"≥ {C16_THROUGHPUT_RATIO}×, lower p99",
        "fastapi": fast16.system if fast16 else None,
        "ratio": None,
        "met": None,
    }
    if s16 and fast16 and fast16.items_per_s:
        entry["ratio"] = s16.items_per_s / fast16.items_per_s
        entry["served"] = f"{s16.items_per_s:.0f}/s, p99 {s16.p99_ms:.2f} ms"
        entry["fastapi_value"] = f"{fast16.items_per_s:.0f}/s, p99 {fast16.p99_ms:.2f} ms"
        entry["met"] = bool(
            entry["ratio"] >= C16_THROUGHPUT_RATIO and s16.p99_ms < fast16.p99_ms and not s16.errors
        )
        if not entry["met"]:
            entry["why"] = _c16_shortfall(s16, fast16, rows)
    found.append(entry)
    fast1 = min((r for r in fastapi if r.concurrency == 1), key=lambda r: r.p50_ms, default=None)
    s1 = served.get(1)
    entry = {
        "pipeline": pipeline,
        "concurrency": 1,
        "measure": "p50",
        "wanted": f"≤ {C1_P50_RATIO}×",
        "fastapi": fast1.system if fast1 else None,
        "ratio": None,
        "met": None,
    }
    if s1 and fast1 and fast1.p50_ms:
        entry["ratio"] = s1.p50_ms / fast1.p50_ms
        entry["served"] = f"p50 {s1.p50_ms:.2f} ms"
        entry["fastapi_value"] = f"p50 {fast1.p50_ms:.2f} ms"
        entry["met"] = bool(entry["ratio"] <= C1_P50_RATIO and not s1.errors)
        if not entry["met"]:
            over = s1.p50_ms - C1_P50_RATIO * fast1.p50_ms
            entry["why"] = (
                f"{s1.errors} errors" if s1.errors else
                f"p50 {over:.2f} ms above {C1_P50_RATIO}× FastAPI's"
            )  # fmt: skip
    found.append(entry)
    return found


def _c16_shortfall(served: Row, fastapi: Row, rows: Sequence[Row]) -> str:
    """By how much the c=16 comparison is missed, and the bound that explains a throughput
    shortfall: the wanted rate against this code's best batch in one process (the
    ``in-process, best batch`` row). When the wanted rate is above that, the machine's cores,
    not the serving path, are the limit: FastAPI's workers already keep them busy."""
    parts = []
    wanted = C16_THROUGHPUT_RATIO * fastapi.items_per_s
    if served.items_per_s < wanted:
        parts.append(f"throughput {wanted - served.items_per_s:.0f}/s short of {wanted:.0f}/s")
        best = max((r for r in rows if r.system.startswith("in-process, best batch")),
                   key=lambda r: r.items_per_s, default=None)  # fmt: skip
        if best and best.items_per_s and wanted > best.items_per_s:
            parts.append(
                f"{wanted:.0f}/s is {wanted / best.items_per_s:.1f}× this code's best batch in "
                f"one process ({best.items_per_s:.0f}/s): compute-bound on these cores"
            )
    if served.p99_ms >= fastapi.p99_ms:
        parts.append(f"p99 {served.p99_ms - fastapi.p99_ms:.2f} ms higher")
    if served.errors:
        parts.append(f"{served.errors} errors")
    return "; ".join(parts)


def comparison_section(entries: Sequence[dict[str, Any]]) -> list[str]:
    """The report's markdown section for :func:`comparison`'s entries of every pipeline."""
    lines = [
        "",
        "## Served (through the HTTP guard) vs the FastAPI service it replaces",
        "",
        "Both from this run, one item per request over HTTP, the same load generator (wrk, "
        "benchmarks/harness/wrk.py). c=16: "
        f"served throughput / the FastAPI layout with the highest throughput, wanted "
        f"≥ {C16_THROUGHPUT_RATIO}× with a lower p99; c=1: served p50 / the lowest FastAPI p50, "
        f"wanted ≤ {C1_P50_RATIO}×.",
        "",
        "| pipeline | concurrency | served | best FastAPI layout | ratio | wanted | met "
        "| by how much, why |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for e in entries:
        ratio = f"{e['ratio']:.2f}×" if e["ratio"] is not None else "–"
        met = {True: "**met**", False: "**missed**", None: "not measured"}[e["met"]]
        lines.append(
            f"| {e['pipeline']} | {e['concurrency']} | {e.get('served', '–')} | "
            f"{e['fastapi'] or '–'}: {e.get('fastapi_value', '–')} | {ratio} | {e['wanted']} | "
            f"{met} | {e.get('why', '')} |"
        )
    return lines
