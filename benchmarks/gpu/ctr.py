"""``ctr_ranking`` rows of ``make bench-gpu``: the served ensemble with the ``torch_gpu`` config
set against what it replaces, on the same GPU, in one run, on the same held-out users.

Every request is one held-out user: their history (0..63 items) and a slate of
``CANDIDATES`` (32) items, the same rule as :func:`benchmarks.harness.inputs.ctr_inputs` with more
users; each system answers the top ``spec.DEFAULT_TOP_K`` (10) items by CTR. Systems:

* **PyTorch in one process** (``builders.onnx_export.ctr_network.load`` of ``build/ctr/model.pt``,
FP32, and
  FP16 on a GPU) at ``Knobs.users_per_forward`` users per forward (full: 1, 16, 64, 256), in
  eager mode. Timed per forward, with
  ``time.perf_counter``: the checks, history window and rows of each user
  (``tritonrepo.ctr.features``, what ``ctr_preprocess`` runs), joining them, the copy to the
  device, the forward, the copy of the scores back (which waits for the GPU) and each user's
  top-k (``tritonrepo.ctr.ranking.top_k``, what ``ctr_postprocess`` runs). Not timed: JSON and
  HTTP. Throughput is users per second of timed work; latency is per forward.
* **The naive server** (:mod:`benchmarks.harness.naive_server`, ``ctr`` on the device) with
  ``workers`` uvicorn workers (gunicorn's UvicornWorker). One worker per GPU is the usual
  layout (each worker holds its own CUDA context and model copy and the GPU time-slices
  between processes); four workers sharing the GPU are measured as well (full mode) because
  JSON, pydantic and the Python around each small forward run on the host, where more
  processes help.
* **The served ensemble** ``ctr_ranking`` (``--model-config-name torch_gpu``), one user per
  request, over HTTP/JSON (KServe v2) with the same load generator as the naive server
  (:mod:`benchmarks.gpu.load`: ``wrk`` when the host has it), and, in full mode, perf_analyzer over
  gRPC as a cross-check of the load source. Per level, Triton's statistics of each step
  (queue and compute ms per request, ``ctr_model``'s average batch in rows); in full mode
  ``ctr_preprocess`` and ``ctr_postprocess`` are also driven alone (their ceiling).

Answers are checked before timing, against PyTorch FP32 on the same device: every item's score
and the order (swaps only between items whose reference scores are within the tolerance), with
the tolerance of the served program's precision (``builders.gates.accuracy_gate.TOLERANCES``; the
precision is read from ``ctr_model/1/torch_metadata.json``), and the held-out AUC of the served
``ctr_model`` (``builders.onnx_export.ctr.auc``). A mismatch raises :class:`AnswersDiffer`.

Interface for :mod:`benchmarks.gpu.run`: :func:`run_section` and :func:`summary`
(:mod:`benchmarks.gpu.ctr_summary`). Alone:
``python -m benchmarks.gpu.ctr [--quick] [--device cpu]`` (on a CPU the served part uses the
``cpu`` config set, only to exercise the code).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks.gpu.ctr_checks import (
    AUC_ROWS,
    CANDIDATES,
    CHECKED_USERS,
    INFER_PATH,
    STEPS,
    WORKLOAD,
    AnswersDiffer,
    _post,
    check,
    naive_body,
    program_precision,
    ranking_users,
    triton_body,
)
from benchmarks.gpu.ctr_in_process import in_process
from benchmarks.gpu.ctr_summary import summary
from benchmarks.gpu.load import Target, timed_levels
from benchmarks.harness import inputs
from benchmarks.harness.inputs import RankRequest
from benchmarks.harness.perf_analyzer import Window
from benchmarks.harness.results import System
from builders.gates.accuracy_gate import TOLERANCES
from reference_data.click_log import ClickLog
from tritonrepo.ctr import spec
from tritonrepo.paths import BUILD_DIR
from tritonrepo_format.config_sets import CPU_SET, TORCH_GPU_SET


@dataclass(frozen=True)
class Knobs:
    """How long and how hard one run measures.

    Attributes:
        users: distinct held-out users (requests); every system cycles through them.
        users_per_forward: in-process batch sizes, in users (x32 rows).
        in_process_s: seconds of timed work per in-process batch size (at least 3 forwards).
        levels: concurrency levels of the naive server and the served ensemble.
        loadgen_s: seconds measured per level, after ``warmup_s`` seconds not counted.
        naive_workers: uvicorn worker counts of the naive server.
        perf_analyzer: perf_analyzer's window for the cross-check; None skips it.
        steps_level: concurrency at which ``ctr_preprocess`` and ``ctr_postprocess`` are
            driven alone (their ceiling without ``ctr_model``); None skips it.
    """

    users: int
    users_per_forward: tuple[int, ...]
    in_process_s: float
    levels: tuple[int, ...]
    loadgen_s: float
    warmup_s: float
    naive_workers: tuple[int, ...]
    perf_analyzer: Window | None
    steps_level: int | None


QUICK = Knobs(256, (1, 16, 64), 0.5, (1, 16), 1.5, 0.5, (1,), None, None)
FULL = Knobs(1024, (1, 16, 64, 256), 2.0, (1, 16, 64), 5.0, 1.0, (1, 4), Window(1500, 25, 4), 64)


def _timed(target: Target, requests, knobs: Knobs, label: str, snapshot=None):
    """:func:`benchmarks.gpu.load.timed_levels` at ``knobs``' levels and durations."""
    return timed_levels(target, requests, knobs.levels, knobs.loadgen_s, knobs.warmup_s, label,
                        snapshot)  # fmt: skip


def naive(requests, reference, device: str, workers: int, knobs: Knobs, out: Path) -> System:
    """The naive FastAPI server on ``device`` with ``workers`` workers, checked, then timed."""
    from benchmarks.harness.naive_server import NaiveServer
    from tritonrepo.server.launcher import free_port

    port = free_port()
    name = f"FastAPI + PyTorch FP32 (gunicorn, {workers} uvicorn worker{'s' * (workers > 1)})"
    with NaiveServer("ctr", port, workers, out / f"naive_ctr_w{workers}.log", device=device):
        answers = []
        for r in requests[:CHECKED_USERS]:
            got = _post(port, "/rank", naive_body(r) | {"top_k": CANDIDATES})
            answers.append((np.asarray(got["item_ids"]), np.asarray(got["scores"])))
        worst = check(name, answers, requests, reference, TOLERANCES["fp32"].max_ctr_diff)
        levels, cores, _ = _timed(Target(port, "/rank", naive_body), requests, knobs,
                                  f"naive w={workers}")  # fmt: skip
    return System(
        WORKLOAD,
        f"naive_w{workers}",
        name,
        "python",
        f"max diff {worst[0]:.1e}",
        levels,
        f"one user per request, HTTP/JSON, model on {device}; {cores}",
        {"max_abs_score_diff_vs_pytorch": worst[0]},
    )


def served(server, requests, log: ClickLog, reference, auc_fp32: float, precision: str, knobs, out):
    """``ctr_ranking`` checked (rankings, then the AUC of ``ctr_model`` on the held-out rows),
    then timed by the load generator and, with ``knobs.perf_analyzer``, by perf_analyzer."""
    from benchmarks.harness import triton_side
    from builders.onnx_export.ctr import auc
    from tritonrepo_client.connection import TritonConnection

    tol = TOLERANCES[precision]
    port = server.options.http_port
    answers = []
    for r in requests[:CHECKED_USERS]:
        outputs = _post(port, INFER_PATH, triton_body(r, CANDIDATES))["outputs"]
        got = {t["name"]: np.asarray(t["data"]) for t in outputs}
        answers.append((got["ITEM_IDS"], got["SCORES"]))
    worst = check("served ctr_ranking", answers, requests, reference, tol.max_ctr_diff)
    with TritonConnection(server.options.grpc_url, "grpc") as conn:
        scores = [
            conn.infer(
                spec.CORE_MODEL, {spec.CORE_INPUT: log.rows[i : i + 512]}, [spec.CORE_OUTPUT]
            )
            for i in range(0, AUC_ROWS, 512)
        ]
    served_auc = auc(
        log.clicks[:AUC_ROWS], np.concatenate([s[spec.CORE_OUTPUT] for s in scores]).reshape(-1)
    )
    if abs(served_auc - auc_fp32) > tol.max_auc_change:
        raise AnswersDiffer(f"served AUC {served_auc:.4f}, PyTorch FP32 {auc_fp32:.4f}")
    accuracy = f"AUC {served_auc:.4f} ({served_auc - auc_fp32:+.4f}), max diff {worst[0]:.1e}"
    values = {
        "auc": served_auc,
        "max_abs_score_diff_vs_pytorch": worst[0],
        "fp16": float(precision == "fp16"),
    } | _instances(server)
    label = f"Triton ctr_ranking ({server.options.model_config_name}, {precision.upper()})"
    high = 16 if 16 in knobs.levels else max(knobs.levels)

    def snapshot():
        return {m: triton_side.step_stats(server, m) for m in STEPS}

    levels, cores, stats = _timed(Target(port, INFER_PATH, triton_body), requests, knobs,
                                  "served", snapshot)  # fmt: skip
    systems = [
        System(
            WORKLOAD,
            "triton_python_load",
            f"{label}, HTTP/JSON, the naive server's load generator",
            "python",
            accuracy,
            levels,
            f"{_batches(stats)}; {cores}",
            values | triton_side.profile(stats, high),
        )
    ]
    if knobs.steps_level:
        systems += steps_alone(server, requests, reference, knobs)
    if knobs.perf_analyzer is not None:
        data = inputs.write_ranking_data(out / "ranking.json", requests)
        try:
            done = triton_side.sweep_steps(
                server, WORKLOAD, data, knobs.levels, knobs.perf_analyzer, out, STEPS
            )
            measured, pa_stats, failures = done.measurements(), done.stats(), done.failures
        except FileNotFoundError as exc:  # no perf_analyzer on this host
            measured, pa_stats, failures = [], {}, [str(exc)]
        systems.append(
            System(
                WORKLOAD,
                "triton_perf_analyzer",
                f"{label}, gRPC, perf_analyzer (load-source cross-check)",
                "perf_analyzer",
                accuracy,
                measured,
                "; ".join([_batches(pa_stats), *failures]),
                values | triton_side.profile(pa_stats, high),
            )
        )
    return systems


def steps_alone(server, requests, reference, knobs: Knobs) -> list[System]:
    """``ctr_preprocess`` and ``ctr_postprocess`` called directly at ``knobs.steps_level``,
    HTTP/JSON in, binary out: what one-request-per-execution Python steps carry without
    ``ctr_model`` (a served peak near one of these means that step is the limit)."""
    binary = {"parameters": {"binary_data_output": True}}

    def post(pair: tuple[RankRequest, np.ndarray]) -> dict:
        request, ctr = pair
        return {
            "inputs": [
                {"name": "ctr", "datatype": "FP32", "shape": [CANDIDATES, 1],
                 "data": ctr.tolist()},
                {"name": "CANDIDATE_IDS", "datatype": "INT64", "shape": [CANDIDATES],
                 "data": request.candidates.tolist()},
                {"name": "K", "datatype": "INT32", "shape": [1], "data": [spec.DEFAULT_TOP_K]},
            ]
        } | binary  # fmt: skip

    systems = []
    for model, body in (
        (spec.PREPROCESS_MODEL, lambda pair: triton_body(pair[0]) | binary),
        (spec.POSTPROCESS_MODEL, post),
    ):
        target = Target(server.options.http_port, f"/v2/models/{model}/infer", body)
        one = dataclasses.replace(knobs, levels=(knobs.steps_level,))
        pairs = list(zip(requests, reference, strict=True))
        levels, cores, _ = _timed(target, pairs, one, model)
        systems.append(
            System(WORKLOAD, f"step_{model}", f"Triton {model} alone", "python", "", levels, cores)
        )
    return systems


def _batches(stats: dict) -> str:
    return "ctr_model average batch (rows) " + ", ".join(
        f"c{lv}: {s[spec.CORE_MODEL].average_batch:.0f}" for lv, s in stats.items()
    )


def _instances(server) -> dict[str, float]:
    """``{"<step>.instances": count}`` of each step of the ensemble, from the served configs."""
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(server.options.http_url)
    try:
        return {
            f"{m}.instances": float(
                sum(int(g.get("count", 1)) for g in client.get_model_config(m)["instance_group"])
            )
            for m in STEPS[1:]
        }
    finally:
        client.close()


def _attempt(what: str, measure, fallback: System) -> list[System]:
    """``measure()``; a system that fails to start, answer or agree is reported, not fatal."""
    try:
        return measure()
    except (AnswersDiffer, RuntimeError, OSError, ImportError) as exc:
        print(f"{what} not measured: {exc}", file=sys.stderr, flush=True)
        fallback.notes = f"not measured: {' '.join(str(exc).split())[:300]}"
        return [fallback]


def run_section(
    quick: bool,
    out: Path,
    device: str = "cuda",
    model_config_name: str | None = None,
    knobs: Knobs | None = None,
) -> list[System]:
    """Every ``ctr_ranking`` system of one run, on the same requests.

    Args:
        quick: the short knobs (:data:`QUICK`, a harness check) instead of :data:`FULL`.
        out: where logs, perf_analyzer CSVs and inputs go.
        device: PyTorch device of the in-process and naive systems.
        model_config_name: config set of the served ensemble; default ``torch_gpu`` on a CUDA
            device, ``cpu`` otherwise (a CPU run only exercises the code).
        knobs: overrides ``quick``'s knobs.

    Returns:
        In-process, naive and served systems. A naive or served system that could not start or
        whose answers differ (:class:`AnswersDiffer`) is returned without levels, the reason in
        its notes, so one failure does not lose the run.

    Raises:
        RuntimeError: ``device`` is CUDA and PyTorch sees no CUDA GPU.
        FileNotFoundError: ``torch_gpu`` without a built program (``make artifacts-gpu``).
    """
    import torch

    from tritonrepo.server.launcher import ServerOptions, TritonServer, free_port

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(
            f"no CUDA GPU visible to PyTorch {torch.__version__}: run on the GPU host, or pass "
            "device='cpu' (--device cpu) to exercise the harness"
        )
    config = model_config_name or (TORCH_GPU_SET if device.startswith("cuda") else CPU_SET)
    precision = program_precision(config)
    knobs = knobs or (QUICK if quick else FULL)
    out.mkdir(parents=True, exist_ok=True)
    requests, log = ranking_users(knobs.users)
    systems, reference, auc_fp32 = in_process(requests, log, device, knobs)
    for workers in knobs.naive_workers:
        systems += _attempt(
            f"naive w={workers}",
            lambda w=workers: [naive(requests, reference, device, w, knobs, out)],
            System(
                WORKLOAD, f"naive_w{workers}", f"FastAPI + PyTorch ({workers} workers)", "python"
            ),
        )
    options = ServerOptions(
        models=(spec.RANKING_ENSEMBLE,),
        model_config_name=config,
        http_port=free_port(),
        grpc_port=free_port(),
        metrics_port=free_port(),
        log_file=out / "tritonserver_ctr.log",
    )

    def measure_served() -> list[System]:
        with TritonServer(options) as server:
            return served(server, requests, log, reference, auc_fp32, precision, knobs, out)

    systems += _attempt(
        "served ctr_ranking",
        measure_served,
        System(WORKLOAD, "triton_python_load", f"Triton ctr_ranking ({config})", "python"),
    )
    return systems


def main(argv: list[str] | None = None) -> int:
    from benchmarks.harness import report

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a harness check, under a minute")
    parser.add_argument("--device", default="cuda", help="PyTorch device (default cuda)")
    parser.add_argument("--model-config-name", default=None, help="default: by device")
    parser.add_argument("--output", type=Path, default=BUILD_DIR / "bench-gpu-ctr")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        systems = run_section(args.quick, args.output, args.device, args.model_config_name)
    except (RuntimeError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    levels = sorted({m.concurrency for s in systems for m in s.levels if m.concurrency})
    lines = [
        *summary(systems),
        *report.summary_table(systems, "users/s", levels or [1]),
        "",
        *report.detail_table(systems),
        "",
        *[f"- {s.name}: {s.notes}" for s in systems if s.notes],
    ]
    (args.output / "ctr_ranking.md").write_text("\n".join(lines) + "\n")
    (args.output / "ctr_ranking.json").write_text(
        json.dumps([dataclasses.asdict(s) for s in systems], indent=1) + "\n"
    )
    print("\n".join(lines))
    print(f"{time.monotonic() - started:.0f} s; report: {args.output / 'ctr_ranking.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
