"""The HTTP guard's cost (:mod:`tritonrepo.server.http_guard`, nginx + njs): text_embedding
requests of one text each over HTTP (tritonclient.http, binary tensors, the Python load generator),
direct to Triton's HTTP port and through a guard in front of it: same server, same texts, same
script, every concurrency level of the run (``--quick``: 1 and 8, 2 s each). The report's rows
``triton_http_direct`` and ``triton_http_guarded`` give throughput and p50/p95/p99 for each.
"""

from __future__ import annotations

import numpy as np
import tritonclient.http as httpclient

from benchmarks import loadgen
from benchmarks.results import System
from benchmarks.settings import Settings
from tritonrepo.server.http_guard import HttpGuard, guard_available
from tritonrepo.server.launcher import TritonServer, free_port
from tritonrepo.text import spec

WORKLOAD = "text_embedding"


def steps(settings: Settings) -> int:
    """Progress steps of :func:`guard_cost`: one per level, direct and guarded."""
    return 2 * len(settings.levels)


def _http_caller(url: str) -> loadgen.CallerFactory:
    def make():
        client = httpclient.InferenceServerClient(url)

        def call(text: str) -> None:
            tensor = httpclient.InferInput("TEXT", [1, 1], "BYTES")
            tensor.set_data_from_numpy(np.array([[text.encode("utf-8")]], dtype=object))
            client.infer(spec.ENSEMBLE, [tensor])

        return call, client.close

    return make


def _embed(url: str, text: str) -> np.ndarray:
    """EMBEDDING FP32 [1, 384] of ``text`` from the server at ``url``."""
    client = httpclient.InferenceServerClient(url)
    try:
        tensor = httpclient.InferInput("TEXT", [1, 1], "BYTES")
        tensor.set_data_from_numpy(np.array([[text.encode("utf-8")]], dtype=object))
        return client.infer(spec.ENSEMBLE, [tensor]).as_numpy("EMBEDDING")
    finally:
        client.close()


def guard_cost(server: TritonServer, texts: list[str], settings: Settings) -> list[System]:
    """Two systems, direct and guarded, measured one after the other on ``server``.

    Raises:
        RuntimeError: nginx + njs are missing (``make guard-deps``), the guard does not start,
            or its answers differ from the direct ones.
    """
    missing = guard_available()
    if missing:
        raise RuntimeError(f"the HTTP guard rows need nginx + njs: {missing}")
    run_dir = settings.workdir / "http-guard"
    try:
        guard = HttpGuard("127.0.0.1", free_port(), server.options.http_port, run_dir).start()
    except Exception as exc:  # LaunchError: one line
        raise RuntimeError(str(exc)) from None
    systems = []
    try:
        direct_url, guard_url = server.options.http_url, guard.url
        if not np.array_equal(_embed(direct_url, texts[0]), _embed(guard_url, texts[0])):
            raise RuntimeError("the HTTP guard changed an answer of text_embedding")
        for key, name, url in (
            ("triton_http_direct", "Triton text_embedding over HTTP, direct", direct_url),
            ("triton_http_guarded", "Triton text_embedding over HTTP, HTTP guard", guard_url),
        ):
            measured = []
            for level in settings.levels:
                measured.append(
                    loadgen.run_closed_loop(_http_caller(url), texts, level, settings.loadgen_s)
                )
                settings.progress(f"{key} c={level}")
            notes = "one text per request, tritonclient.http, binary tensors"
            if key == "triton_http_guarded":
                notes += "; nginx + njs (deploy/guard/), same server"
            systems.append(System(WORKLOAD, key, name, "python", "same answers", measured, notes))
    finally:
        guard.stop()
    direct, guarded = systems
    for d, g in zip(direct.levels, guarded.levels, strict=True):
        guarded.values[f"p50_overhead_ms_c{d.concurrency}"] = g.p50_ms - d.p50_ms
        guarded.values[f"throughput_ratio_c{d.concurrency}"] = g.throughput / d.throughput
    return systems
