"""``digit_scans`` rows of ``make bench-gpu``: a described pipeline whose core is a team's own
torch module, served with the ``torch_gpu`` config set, against the FastAPI service of the same
pipeline on the same GPU, in one run, on the same held-out scans.

``digit_scans`` (``pipelines/digit_scans``): a 64 x 64 UINT8 scan in, the digit and its
probabilities out; the core is a ResNet-18 that ``build()`` trains. Systems, one scan per
request, JSON bodies built once before timing, driven by the same closed-loop load generator
(:mod:`benchmarks.gpu.load`: ``wrk`` when the host has it):

* **Served:** the launcher with ``--model-config-name torch_gpu`` (one Python model on the GPU:
  preprocess, the core's ``torch.export`` program with CUDA graphs, postprocess), KServe v2 JSON
  to Triton's own HTTP endpoint (no HTTP guard: the GPU host has no nginx, as in the other
  sections).
* **FastAPI:** :mod:`benchmarks.pipelines.fastapi_service` with the saved module in eager PyTorch
on the
  same GPU (:class:`benchmarks.pipelines.fastapi_service.TorchCore`, in the served program's
  precision):
  the same preprocess and postprocess functions, gunicorn with 1, 4 and one-per-core uvicorn
  workers (full mode), each worker its own CUDA context and model copy.

Answers are checked before timing against the saved module in eager PyTorch FP32 on the same
GPU: every probability within :data:`TOLERANCE` of the program's precision and the digits equal
to the reference's. A mismatch raises :class:`AnswersDiffer`; a system that fails is reported,
not fatal. :func:`summary` compares served and the best FastAPI layout at c=16
(:data:`C16_GOAL`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmarks.gpu.ctr_checks import AnswersDiffer, _post
from benchmarks.gpu.load import Target, timed_levels
from benchmarks.harness.loadgen import Measurement
from benchmarks.harness.results import System
from tritonrepo_format.config_sets import TORCH_GPU_SET

PIPELINE = WORKLOAD = "digit_scans"
INFER_PATH = f"/v2/models/{PIPELINE}/infer"
C16_GOAL = 2.0  # served over the best FastAPI layout's throughput at c=16, at least
# Largest |probability - FP32 probability|: FP16 logits of this ResNet-18 move a softmax output by
# ~1e-3 (the program's gate is the logits' cosine, 0.999); FP32 is rounding only.
TOLERANCE = {"fp16": 1e-2, "fp32": 1e-5}
CHECKED = 64  # scans checked per system before timing
QUICK = {"levels": (1, 16), "seconds": 2.0, "warmup_s": 0.5, "workers": (4,)}
FULL = {"levels": (1, 16, 64), "seconds": 6.0, "warmup_s": 1.0, "workers": (1, 4, 16)}


def held_out() -> tuple[list[dict[str, np.ndarray]], np.ndarray]:
    """The 450 held-out scans as single-scan requests (``IMAGE`` UINT8 ``[1, 64, 64]``) and
    their digits."""
    from pipelines.digit_scans.model import scans

    _, x_test, _, y_test = scans()
    return [{"IMAGE": x_test[i : i + 1]} for i in range(len(x_test))], y_test


def reference(requests: Sequence[dict[str, np.ndarray]], device: str) -> np.ndarray:
    """The saved module's probabilities FP32 ``[n, 10]``: the pipeline's preprocess, eager
    PyTorch FP32 on ``device``, its postprocess."""
    from benchmarks.pipelines.fastapi_service import TorchCore
    from tritonrepo.description import load
    from tritonrepo.paths import PIPELINES

    core = TorchCore(load(PIPELINES / PIPELINE / "pipeline.toml"), device, "fp32")
    images = np.concatenate([r["IMAGE"] for r in requests])
    return core({"IMAGE": images})["PROBABILITIES"]


def kserve_body(request: dict[str, np.ndarray]) -> dict:
    image = np.asarray(request["IMAGE"])
    return {
        "inputs": [
            {"name": "IMAGE", "datatype": "UINT8", "shape": list(image.shape),
             "data": image.reshape(-1).tolist()}
        ]
    }  # fmt: skip


def fastapi_body(request: dict[str, np.ndarray]) -> dict:
    return {"IMAGE": np.asarray(request["IMAGE"]).tolist()}


def check(name: str, got: np.ndarray, want: np.ndarray, tolerance: float) -> float:
    """Largest |probability difference|; raises :class:`AnswersDiffer` above ``tolerance`` or
    when a digit differs from the reference's."""
    worst = float(np.max(np.abs(got - want)))
    if worst > tolerance or (got.argmax(1) != want.argmax(1)).any():
        raise AnswersDiffer(f"{name}: max |p - p_fp32| {worst:.2e} (limit {tolerance})")
    return worst


def _levels(target: Target, requests, knobs: dict, label: str, snapshot=None):
    return timed_levels(target, requests, knobs["levels"], knobs["seconds"], knobs["warmup_s"],
                        label, snapshot)  # fmt: skip


def fastapi(requests, want, device: str, precision: str, workers: int, knobs, out) -> System:
    """The FastAPI service with ``workers`` workers on ``device``, checked, then timed."""
    from benchmarks.pipelines.fastapi_service import PipelineFastApi
    from tritonrepo.server.launcher import free_port

    port = free_port()
    name = f"FastAPI + PyTorch {precision.upper()} eager ({workers} uvicorn worker" + (
        "s)" if workers > 1 else ")"
    )
    log = out / f"fastapi_{PIPELINE}_w{workers}.log"
    with PipelineFastApi(PIPELINE, port, workers, log, startup_timeout_s=300, device=device):
        got = np.concatenate(
            [_post(port, f"/{PIPELINE}", fastapi_body(r))["PROBABILITIES"] for r in
             requests[:CHECKED]]
        )  # fmt: skip
        worst = check(name, got, want[:CHECKED], TOLERANCE[precision])
        levels, note, _ = _levels(Target(port, f"/{PIPELINE}", fastapi_body), requests, knobs,
                                  f"FastAPI w={workers}")  # fmt: skip
    return System(WORKLOAD, f"fastapi_w{workers}", name, "python", f"max diff {worst:.1e}",
                  levels, f"one scan per request, JSON; {note}")  # fmt: skip


def served(requests, want, precision: str, knobs, out) -> System:
    """``digit_scans`` with the torch_gpu set, checked, then timed, with the one-step model's
    average executed batch per level (Triton's statistics)."""
    from benchmarks.harness import triton_side
    from tritonrepo.server.launcher import ServerOptions, TritonServer, free_port

    options = ServerOptions(
        models=(PIPELINE,), model_config_name=TORCH_GPU_SET, http_port=free_port(),
        grpc_port=free_port(), metrics_port=free_port(), http_guard=False,
        log_file=out / f"tritonserver_{PIPELINE}.log",
    )  # fmt: skip
    name = f"Triton {PIPELINE} (torch_gpu, one step, {precision.upper()} program)"
    with TritonServer(options) as server:
        port = options.http_port
        got = []
        for r in requests[:CHECKED]:
            outputs = _post(port, INFER_PATH, kserve_body(r))["outputs"]
            probabilities = next(t for t in outputs if t["name"] == "PROBABILITIES")
            got.append(np.asarray(probabilities["data"], dtype=np.float32).reshape(1, -1))
        worst = check(name, np.concatenate(got), want[:CHECKED], TOLERANCE[precision])

        def snapshot():
            return {PIPELINE: triton_side.step_stats(server, PIPELINE)}

        levels, note, stats = _levels(Target(port, INFER_PATH, kserve_body), requests, knobs,
                                      "served", snapshot)  # fmt: skip
    batches = ", ".join(f"c{lv}: {s[PIPELINE].average_batch:.1f}" for lv, s in stats.items())
    notes = f"KServe v2 JSON, Triton's HTTP; average batch {batches}; {note}"
    return System(WORKLOAD, "served", name, "python", f"max diff {worst:.1e}", levels, notes)


def run_section(quick: bool, out: Path, device: str = "cuda:0") -> list[System]:
    """Every ``digit_scans`` system of one run (module docstring)."""
    from benchmarks.pipelines.fastapi_service import program_precision
    from tritonrepo.description import load
    from tritonrepo.paths import PIPELINES

    knobs = QUICK if quick else FULL
    out.mkdir(parents=True, exist_ok=True)
    precision = program_precision(load(PIPELINES / PIPELINE / "pipeline.toml"))
    requests, _ = held_out()
    want = reference(requests, device)
    systems = []
    attempts = [("served", lambda: served(requests, want, precision, knobs, out))]
    attempts += [
        (f"FastAPI w={w}", lambda w=w: fastapi(requests, want, device, precision, w, knobs, out))
        for w in knobs["workers"]
    ]
    for what, measure in attempts:
        try:
            systems.append(measure())
        except (AnswersDiffer, RuntimeError, OSError) as exc:
            print(f"{what} not measured: {exc}", file=sys.stderr, flush=True)
            systems.append(System(WORKLOAD, what, what, "python", notes=f"not measured: {exc}"))
    return systems


def _throughput(m: Measurement | None) -> float:
    return m.throughput if m is not None else 0.0


def summary(systems: list[System]) -> list[str]:
    """The c=16 comparison: served over the best FastAPI layout, met or missed."""
    served_row = next((s for s in systems if s.key == "served"), None)
    fast = [s for s in systems if s.key.startswith("fastapi_w") and s.at(16) is not None]
    if served_row is None or served_row.at(16) is None or not fast:
        return ["- **digit_scans:** not measured (see the table's notes)", ""]
    best = max(fast, key=lambda s: _throughput(s.at(16)))
    mine, theirs = served_row.at(16), best.at(16)
    assert mine is not None and theirs is not None
    ratio = mine.throughput / theirs.throughput
    verdict = "met" if ratio >= C16_GOAL else f"missed by {C16_GOAL / ratio:.2f}x"
    return [
        f"- **digit_scans, one scan per request, c=16:** served {mine.throughput:,.0f} scans/s "
        f"(p99 {mine.p99_ms:.1f} ms) vs {best.name} {theirs.throughput:,.0f} (p99 "
        f"{theirs.p99_ms:.1f} ms) = {ratio:.2f}x (wanted >= {C16_GOAL:g}x: {verdict})",
        "",
    ]
