"""The HTTP guard's cost (:mod:`tritonrepo.server.http_guard`, nginx + njs): text_embedding
requests of one text each over HTTP (tritonclient.http, binary tensors, the Python load generator),
direct to Triton's HTTP port and through a guard in front of it, and through the guard's OpenAI
``/v1/embeddings`` (``deploy/guard/openai_embeddings.js``) with OpenAI's own client: same server,
same texts, same script, every concurrency level of the run (``--quick``: 1 and 8, 2 s each). The
report's rows ``triton_http_direct``, ``triton_http_guarded`` and ``openai_embeddings_guarded``
give throughput and p50/p95/p99 for each.
"""

from __future__ import annotations

import numpy as np
import tritonclient.http as httpclient

from benchmarks.harness import loadgen
from benchmarks.harness.results import System
from benchmarks.harness.settings import Settings
from tritonrepo.server.http_guard import HttpGuard, guard_available
from tritonrepo.server.launcher import TritonServer, free_port
from tritonrepo.text import spec

WORKLOAD = "text_embedding"


def steps(settings: Settings) -> int:
    """Progress steps of :func:`guard_cost`: one per level, direct, guarded and OpenAI."""
    return 3 * len(settings.levels)


def _http_caller(url: str) -> loadgen.CallerFactory:
    def make():
        client = httpclient.InferenceServerClient(url)

        def call(text: str) -> None:
            tensor = httpclient.InferInput("TEXT", [1, 1], "BYTES")
            tensor.set_data_from_numpy(np.array([[text.encode("utf-8")]], dtype=object))
            client.infer(spec.ENSEMBLE, [tensor])

        return call, client.close

    return make


def _openai_caller(url: str) -> loadgen.CallerFactory:
    def make():
        import openai

        client = openai.OpenAI(base_url=f"http://{url}/v1", api_key="unused", max_retries=0)

        def call(text: str) -> None:
            client.embeddings.create(model=spec.ENSEMBLE, input=text)

        return call, client.close

    return make


def _openai_embed(url: str, text: str) -> np.ndarray:
    """EMBEDDING FP32 [1, 384] of ``text`` from ``/v1/embeddings`` at ``url`` (OpenAI's client)."""
    import openai

    with openai.OpenAI(base_url=f"http://{url}/v1", api_key="unused") as client:
        answer = client.embeddings.create(model=spec.ENSEMBLE, input=text)
    return np.array([answer.data[0].embedding], dtype=np.float32)


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
    """Three systems, direct, guarded and OpenAI's endpoint, measured one after the other on
    ``server``.

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
        want = _embed(direct_url, texts[0])
        if not np.array_equal(want, _embed(guard_url, texts[0])):
            raise RuntimeError("the HTTP guard changed an answer of text_embedding")
        if not np.array_equal(want, _openai_embed(guard_url, texts[0])):
            raise RuntimeError("/v1/embeddings answered other values than KServe v2")
        kserve = "one text per request, tritonclient.http, binary tensors"
        for key, name, caller, notes in (
            ("triton_http_direct", "Triton text_embedding over HTTP, direct",
             _http_caller(direct_url), kserve),
            ("triton_http_guarded", "Triton text_embedding over HTTP, HTTP guard",
             _http_caller(guard_url), f"{kserve}; nginx + njs (deploy/guard/), same server"),
            ("openai_embeddings_guarded", "text_embedding over OpenAI's /v1/embeddings",
             _openai_caller(guard_url),
             "one text per request, OpenAI's Python client (base64), through the HTTP guard"),
        ):  # fmt: skip
            measured = []
            for level in settings.levels:
                measured.append(loadgen.run_closed_loop(caller, texts, level, settings.loadgen_s))
                settings.progress(f"{key} c={level}")
            systems.append(System(WORKLOAD, key, name, "python", "same answers", measured, notes))
    finally:
        guard.stop()
    direct, guarded, openai_row = systems
    for d, g, o in zip(direct.levels, guarded.levels, openai_row.levels, strict=True):
        guarded.values[f"p50_overhead_ms_c{d.concurrency}"] = g.p50_ms - d.p50_ms
        guarded.values[f"throughput_ratio_c{d.concurrency}"] = g.throughput / d.throughput
        openai_row.values[f"p50_vs_guarded_ms_c{d.concurrency}"] = o.p50_ms - g.p50_ms
        openai_row.values[f"throughput_vs_guarded_c{d.concurrency}"] = o.throughput / g.throughput
    return systems
