"""``make bench-pipelines``, point 3: served vs in-process, one item per request.

The pipeline in this process (:class:`TimedInProcess`), the load generator's callers for it and
for the served pipeline, the batch sweep's timing, the measured rows and the per-pipeline result,
and the output check run before any timing.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.harness import loadgen
from benchmarks.harness.foreign_load import ForeignLoad
from benchmarks.harness.loadgen import Measurement
from builders.pipeline.in_process import InProcess
from tritonrepo.description import Pipeline

CONCURRENCY = (1, 16)
BATCHES = (1, 4, 8, 16, 32)  # in-process batch sweep (capped at the description's max batch)
WARMUP_S = 1.0
# wrk runs per served and FastAPI row at concurrency 16, the best kept (benchmarks.harness.wrk.run).
TRIALS = {1: 1, 16: 2}


class TimedInProcess(InProcess):
    """The pipeline in this process with one ONNX Runtime session shared by every caller, set
    as the served core's (``tests.pipeline_suite.in_process`` opens a session per call), and
    the time spent in each stage when :attr:`timing` is on."""

    def __init__(self, pipeline: Pipeline, model_file: Path) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()  # as configs/cpu.pbtxt: 0 threads = one per core
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        super().__init__(pipeline, model_file, options)
        self.stage_s = {"preprocess": 0.0, "onnxruntime": 0.0, "postprocess": 0.0}
        self.timing = False

    def __call__(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Batch-first request tensors → the pipeline's outputs (numpy, batch-first)."""
        t0 = time.perf_counter()
        pre = self.pre(dict(inputs))
        feeds = self.core_feeds(pre)
        t1 = time.perf_counter()
        results = self.run_core(feeds)
        t2 = time.perf_counter()
        out = self.post(self.post_inputs(pre, results))
        if self.timing:
            self.stage_s["preprocess"] += t1 - t0
            self.stage_s["onnxruntime"] += t2 - t1
            self.stage_s["postprocess"] += time.perf_counter() - t2
        return out


def rows_of(samples: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
    """One single-row request per sample row."""
    n = len(next(iter(samples.values())))
    return [{k: np.asarray(v[i : i + 1]) for k, v in samples.items()} for i in range(n)]


def batch_of(samples: dict[str, np.ndarray], size: int, start: int) -> dict[str, np.ndarray]:
    """``size`` sample rows from ``start``, cycling through the samples."""
    n = len(next(iter(samples.values())))
    index = (np.arange(size) + start) % n
    return {k: np.asarray(v)[index] for k, v in samples.items()}


def kserve_body(request: dict[str, np.ndarray], pipeline: Any) -> tuple[bytes, dict[str, str]]:
    """What a client of the KServe v2 HTTP endpoint sends for ``request`` (built once, before
    timing, as the FastAPI rows' JSON bodies are): numeric inputs as JSON ``data``, BYTES inputs
    in the binary tensor extension (JSON cannot carry raw bytes), outputs asked for as JSON.
    Returns the body and its headers (``Inference-Header-Content-Length`` with binary data)."""
    import tritonclient.http as httpclient

    inputs = []
    for tensor in pipeline.inputs:
        if tensor.name not in request:
            continue
        value = np.asarray(request[tensor.name])
        binary = tensor.dtype == "BYTES"
        item = httpclient.InferInput(tensor.name, list(value.shape), tensor.dtype)
        item.set_data_from_numpy(value.astype(object) if binary else value, binary_data=binary)
        inputs.append(item)
    outputs = [httpclient.InferRequestedOutput(t.name, binary_data=False) for t in pipeline.outputs]
    body, json_size = httpclient.InferenceServerClient.generate_request_body(inputs, outputs)
    if json_size is None:
        data = body.encode() if isinstance(body, str) else body
        return data, {"Content-Type": "application/json"}
    return body, {
        "Content-Type": "application/octet-stream",
        "Inference-Header-Content-Length": str(json_size),
    }


def local_caller(pipeline: TimedInProcess) -> loadgen.CallerFactory:
    """Workers calling the shared in-process pipeline."""
    return lambda: ((lambda request: (pipeline(request), None)[1]), lambda: None)


def timed_batches(
    pipeline: TimedInProcess, batches: Sequence[dict[str, np.ndarray]], seconds: float
) -> Measurement:
    """One thread calling ``pipeline`` on ``batches`` in turn, after one warm-up call, until
    ``seconds`` have passed and at least 3 calls were made (a window alone would count no call
    of a batch slower than it); latencies are per call."""
    pipeline(batches[0])
    latencies: list[float] = []
    started = time.perf_counter()
    while time.perf_counter() - started < seconds or len(latencies) < 3:
        sent = time.perf_counter()
        pipeline(batches[len(latencies) % len(batches)])
        latencies.append(time.perf_counter() - sent)
    return Measurement.from_latencies(1, latencies, time.perf_counter() - started, 0)


@dataclass
class Row:
    """One measured system of one pipeline; ``items_per_s`` = requests/s x batch."""

    system: str
    concurrency: int
    batch: int
    items_per_s: float
    p50_ms: float
    p99_ms: float
    requests: int
    errors: int
    notes: str = ""
    foreign_cpu: float = 0.0

    @classmethod
    def of(
        cls, system: str, m: Measurement, load: ForeignLoad, batch: int = 1, notes: str = ""
    ) -> Row:
        return cls(
            system,
            m.concurrency,
            batch,
            m.throughput * batch,
            m.p50_ms,
            m.p99_ms,
            m.requests,
            m.errors,
            notes,
            load.share,
        )


@dataclass
class Result:
    """Everything measured for one pipeline."""

    pipeline: str
    summary: str
    sample_rows: int
    lines: dict[str, Any]
    phases_s: dict[str, float]
    rows: list[Row] = field(default_factory=list)
    stage_ms_batch1: dict[str, float] = field(default_factory=dict)
    batch_sweep: dict[int, float] = field(default_factory=dict)
    checks: str = ""
    phases_foreign_cpu: float = 0.0


def check_outputs(got: dict[str, np.ndarray], want: dict[str, Any], where: str) -> None:
    """The test suite's comparison (numbers within 1e-5, BYTES equal); SystemExit on a
    difference."""
    from tests.pipeline_suite import assert_same

    try:
        assert_same(got, want, where)
    except AssertionError as exc:
        raise SystemExit(f"outputs differ before timing: {exc}") from exc
