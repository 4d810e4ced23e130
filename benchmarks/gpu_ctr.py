"""``ctr_ranking`` rows of ``make bench-gpu``: the served ensemble with the ``torch_gpu`` config
set against what it replaces, on the same GPU, in one run, on the same held-out users.

Every request is one held-out user: their history (0..63 items) and a slate of
``CANDIDATES`` (32) items, the same rule as :func:`benchmarks.inputs.ctr_inputs` with more
users; each system answers the top ``spec.DEFAULT_TOP_K`` (10) items by CTR. Systems:

* **PyTorch in one process** (``builders.ctr_network.load`` of ``build/ctr/model.pt``, FP32, and
  FP16 on a GPU) at ``Knobs.users_per_forward`` users per forward (full: 1, 16, 64, 256), in
  eager mode. Timed per forward, with
  ``time.perf_counter``: the checks, history window and rows of each user
  (``tritonrepo.ctr.features``, what ``ctr_preprocess`` runs), joining them, the copy to the
  device, the forward, the copy of the scores back (which waits for the GPU) and each user's
  top-k (``tritonrepo.ctr.ranking.top_k``, what ``ctr_postprocess`` runs). Not timed: JSON and
  HTTP. Throughput is users per second of timed work; latency is per forward.
* **The naive server** (:mod:`benchmarks.naive_server`, ``ctr`` on the device) with
  ``workers`` uvicorn workers (gunicorn's UvicornWorker). One worker per GPU is the usual
  layout (each worker holds its own CUDA context and model copy and the GPU time-slices
  between processes); four workers sharing the GPU are measured as well (full mode) because
  JSON, pydantic and the Python around each small forward run on the host, where more
  processes help.
* **The served ensemble** ``ctr_ranking`` (``--model-config-name torch_gpu``), one user per
  request, over HTTP/JSON (KServe v2) with the same load generator and caller as the naive
  server (:func:`benchmarks.loadgen.http_json_caller`), and, in full mode, perf_analyzer over
  gRPC as a cross-check of the load source. Per level, Triton's statistics of each step
  (queue and compute ms per request, ``ctr_model``'s average batch in rows); in full mode
  ``ctr_preprocess`` and ``ctr_postprocess`` are also driven alone (their ceiling).

Answers are checked before timing, against PyTorch FP32 on the same device: every item's score
and the order (swaps only between items whose reference scores are within the tolerance), with
the tolerance of the served program's precision (``builders.accuracy_gate.TOLERANCES``; the
precision is read from ``ctr_model/1/torch_metadata.json``), and the held-out AUC of the served
``ctr_model`` (``builders.ctr_onnx.auc``). A mismatch raises :class:`AnswersDiffer`.

Interface for :mod:`benchmarks.gpu`: :func:`run_section` and :func:`summary`. Alone:
``python -m benchmarks.gpu_ctr [--quick] [--device cpu]`` (on a CPU the served part uses the
``cpu`` config set, only to exercise the code).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from benchmarks import inputs, loadgen
from benchmarks.inputs import RankRequest
from benchmarks.loadgen import Measurement
from benchmarks.perf_analyzer import Window
from benchmarks.results import IN_PROCESS, System
from builders.accuracy_gate import TOLERANCES
from tritonrepo.ctr import spec
from tritonrepo.ctr.click_log import HELDOUT_SPLIT, ClickLog, ClickLogGenerator
from tritonrepo.ctr.features import check_candidates, check_history, history_window, model_rows
from tritonrepo.ctr.ranking import top_k
from tritonrepo.paths import BUILD_DIR, MODEL_REPOSITORY

WORKLOAD = spec.RANKING_ENSEMBLE
CANDIDATES = inputs.CANDIDATES_PER_REQUEST  # 32 per user
STEPS = (spec.RANKING_ENSEMBLE, spec.PREPROCESS_MODEL, spec.CORE_MODEL, spec.POSTPROCESS_MODEL)
AUC_ROWS = 4096  # held-out rows for the AUC: builders.torch_export.GATE_ROWS
CHECKED_USERS = 16  # users whose full ranking (TOP_K = 32) is compared before timing
GOAL_VS_NAIVE = 5.0  # served at c=16 vs the naive server at c=16
GOAL_VS_IN_PROCESS = 1.0  # served peak vs in-process at its best batch
INFER_PATH = f"/v2/models/{spec.RANKING_ENSEMBLE}/infer"


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


class AnswersDiffer(RuntimeError):
    """A system's rankings or AUC differ from PyTorch FP32 by more than the tolerance."""


def ranking_users(users: int) -> tuple[list[RankRequest], ClickLog]:
    """``users`` held-out users, user ``i`` ranking candidates ``32 i .. 32 i + 31`` of the log
    (the rule of :func:`benchmarks.inputs.ctr_inputs`), and the log (for the AUC)."""
    log = ClickLogGenerator().sample(max(users * CANDIDATES, AUC_ROWS), HELDOUT_SPLIT)
    slates = log.candidates.reshape(-1, CANDIDATES)
    requests = [
        RankRequest(log.histories[i].astype(np.int64), slates[i].astype(np.int64))
        for i in range(users)
    ]
    return requests, log


def program_precision(model_config_name: str) -> str:
    """``"fp16"`` or ``"fp32"``: what the served ``ctr_model`` computes in.

    Raises:
        FileNotFoundError: ``torch_gpu`` without a built program (``make artifacts-gpu``).
    """
    if model_config_name != "torch_gpu":
        return "fp32"  # the cpu set serves the FP32 ONNX export
    path = MODEL_REPOSITORY / spec.CORE_MODEL / "1" / "torch_metadata.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: run `make artifacts-gpu` on this host")
    return json.loads(path.read_text())["precision"]


def agreement(
    ids: np.ndarray, scores: np.ndarray, candidates: np.ndarray, expected: np.ndarray
) -> tuple[float, float]:
    """How far a ranking is from the reference scores.

    Args:
        ids: INT64 ``[k]`` ranked item ids; scores: FP32 ``[k]`` their scores.
        candidates: INT64 ``[n]`` the request's candidates; expected: FP32 ``[n]`` reference CTR.

    Returns:
        ``(max |score - reference|, worst inversion)``: the inversion is the largest amount by
        which a later item's reference score exceeds an earlier one's, or an item left out beats
        one returned (0 for a ranking in the reference's order).

    Raises:
        AnswersDiffer: ``ids`` is not ``k`` of the candidates.
    """
    want = dict(zip(candidates.tolist(), expected.tolist(), strict=True))
    left = Counter(candidates.tolist()) - Counter(ids.tolist())
    if len(ids) != len(scores) or sum(left.values()) != len(candidates) - len(ids):
        raise AnswersDiffer(f"ranked ids {ids.tolist()} are not candidates {candidates.tolist()}")
    ref = np.array([want[i] for i in ids.tolist()], dtype=np.float64)
    diff = float(np.max(np.abs(np.asarray(scores, dtype=np.float64) - ref)))
    inversion = float(np.max(np.diff(ref), initial=0.0))
    if left:
        inversion = max(inversion, max(want[i] for i in left) - float(ref.min()))
    return diff, inversion


def _post(port: int, path: str, body: dict) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        return json.loads(answer.read())


def naive_body(request: RankRequest) -> dict:
    """The naive server's ``POST /rank`` body (top 10 by default)."""
    return {"history": request.history.tolist(), "candidates": request.candidates.tolist()}


def triton_body(request: RankRequest, k: int | None = None) -> dict:
    """A KServe v2 JSON body for ``ctr_ranking`` (``TOP_K`` sent only when ``k`` is given)."""
    tensors = [
        {"name": "HISTORY", "datatype": "INT64", "shape": [len(request.history)],
         "data": request.history.tolist()},
        {"name": "CANDIDATES", "datatype": "INT64", "shape": [len(request.candidates)],
         "data": request.candidates.tolist()},
    ]  # fmt: skip
    if k is not None:
        tensors.append({"name": "TOP_K", "datatype": "INT32", "shape": [1], "data": [k]})
    return {"inputs": tensors}


def check(name: str, answers: list[tuple[np.ndarray, np.ndarray]], requests, expected, tol: float):
    """Raise :class:`AnswersDiffer` unless every answer agrees within ``tol``.

    Returns:
        The worst ``(score diff, inversion)``.
    """
    worst = (0.0, 0.0)
    for (ids, scores), request, want in zip(answers, requests, expected, strict=False):
        diff, inversion = agreement(ids, scores, request.candidates, want)
        worst = (max(worst[0], diff), max(worst[1], inversion))
    if worst[0] > tol or worst[1] > 2 * tol:
        raise AnswersDiffer(
            f"{name}: scores off by {worst[0]:.2e}, order inverted by {worst[1]:.2e} "
            f"(tolerance {tol:.0e})"
        )
    return worst


def _timed_levels(make, requests, knobs: Knobs, label: str, snapshot=None):
    """The load generator at each of ``knobs.levels``.

    Args:
        snapshot: optional ``() -> {model: StepStats}``, taken before and after each level.

    Returns:
        The measurements, a note on the CPU cores the load generator's process used per
        level (near 1.0: Python's GIL may be the limit), and per level the step statistics.
    """
    levels, cores, stats = [], [], {}
    for level in knobs.levels:
        before = snapshot() if snapshot else {}
        cpu, wall = time.process_time(), time.monotonic()
        m = loadgen.run_closed_loop(make, requests, level, knobs.loadgen_s, knobs.warmup_s)
        cores.append(f"c{level}: {(time.process_time() - cpu) / (time.monotonic() - wall):.2f}")
        if snapshot:
            stats[level] = {k: v.since(before[k]) for k, v in snapshot().items()}
        levels.append(m)
        print(f"{label} c={level}: {m.throughput:.0f} users/s, p99 {m.p99_ms:.1f} ms", flush=True)
    return levels, "load generator CPU cores " + ", ".join(cores), stats


def _rows(request: RankRequest) -> np.ndarray:
    return model_rows(history_window(request.history), request.candidates)


def _time_forwards(model, requests, users: int, device: str, seconds: float):
    """One warm-up forward, then forwards of ``users`` users until ``seconds`` of timed work
    (at least 3); see the module docstring for what is timed.

    Returns:
        ``(users/s, per-forward seconds FP64 [forwards], users timed)``.
    """
    import torch

    latencies: list[float] = []
    step = 0
    with torch.inference_mode():
        while sum(latencies) < seconds or len(latencies) < 3:
            chunk = [requests[(step * users + j) % len(requests)] for j in range(users)]
            started = time.perf_counter()
            windows = [history_window(check_history(r.history)) for r in chunk]
            slates = [check_candidates(r.candidates) for r in chunk]
            rows = np.concatenate([model_rows(w, c) for w, c in zip(windows, slates, strict=True)])
            ctr = model(torch.from_numpy(rows).to(device)).float().cpu().numpy().reshape(-1)
            for j, slate in enumerate(slates):
                top_k(slate, ctr[j * CANDIDATES : (j + 1) * CANDIDATES], spec.DEFAULT_TOP_K)
            if step:  # the first is the warm-up: kernels chosen, caches filled
                latencies.append(time.perf_counter() - started)
            step += 1
    done = users * len(latencies)
    return done / sum(latencies), np.asarray(latencies), done


def in_process(requests, log: ClickLog, device: str, knobs: Knobs):
    """PyTorch FP32 (and FP16 on a GPU) at each of ``knobs.users_per_forward``.

    Returns:
        The systems, the FP32 reference CTR of each request (FP32 ``[32]`` each, one forward
        per user) and the FP32 held-out AUC.
    """
    import torch

    from builders import ctr_network
    from builders.ctr_onnx import auc

    weights = BUILD_DIR / "ctr" / "model.pt"
    models = {"fp32": ctr_network.load(weights).to(device)}
    if device != "cpu":
        models["fp16"] = ctr_network.load(weights).to(device).half()
    rows = torch.as_tensor(log.rows[:AUC_ROWS], device=device)
    with torch.inference_mode():
        scored = {
            p: torch.cat([m(rows[i : i + 512]).float() for i in range(0, len(rows), 512)])
            for p, m in models.items()
        }
        reference = [
            models["fp32"](torch.as_tensor(_rows(r), device=device)).cpu().numpy().reshape(-1)
            for r in requests
        ]
    aucs = {p: auc(log.clicks[:AUC_ROWS], s.cpu().numpy().reshape(-1)) for p, s in scored.items()}
    systems = []
    for precision, model in models.items():
        diff = float((scored[precision] - scored["fp32"]).abs().max())
        accuracy = f"AUC {aucs[precision]:.4f}"
        if precision != "fp32":
            accuracy += f" ({aucs[precision] - aucs['fp32']:+.4f}), max diff {diff:.1e}"
        for users in knobs.users_per_forward:
            rate, seconds, done = _time_forwards(model, requests, users, device, knobs.in_process_s)
            p50, p95, p99 = (float(v) for v in np.percentile(seconds * 1e3, [50, 95, 99]))
            plural = "s" * (users > 1)
            systems.append(
                System(
                    WORKLOAD,
                    f"torch_{precision}_u{users}",
                    f"PyTorch {precision.upper()}, in-process, {users} user{plural} per forward",
                    IN_PROCESS,
                    accuracy,
                    [Measurement(0, rate, p50, p95, p99, done, 0)],
                    f"{users * CANDIDATES} rows per forward; timed: features, copy, forward, "
                    "copy back, top-k; latency per forward",
                    {"auc": aucs[precision], "max_abs_ctr_diff_vs_fp32": diff},
                )
            )
            print(f"{systems[-1].name}: {rate:.0f} users/s", flush=True)
    del models, rows, scored
    if device != "cpu":
        torch.cuda.empty_cache()
    return systems, reference, aucs["fp32"]


def naive(requests, reference, device: str, workers: int, knobs: Knobs, out: Path) -> System:
    """The naive FastAPI server on ``device`` with ``workers`` workers, checked, then timed."""
    from benchmarks.naive_server import NaiveServer
    from tritonrepo.launcher import free_port

    port = free_port()
    name = f"FastAPI + PyTorch FP32 (gunicorn, {workers} uvicorn worker{'s' * (workers > 1)})"
    with NaiveServer("ctr", port, workers, out / f"naive_ctr_w{workers}.log", device=device):
        answers = []
        for r in requests[:CHECKED_USERS]:
            got = _post(port, "/rank", naive_body(r) | {"top_k": CANDIDATES})
            answers.append((np.asarray(got["item_ids"]), np.asarray(got["scores"])))
        worst = check(name, answers, requests, reference, TOLERANCES["fp32"].max_ctr_diff)
        make = loadgen.http_json_caller(port, "/rank", naive_body)
        levels, cores, _ = _timed_levels(make, requests, knobs, f"naive w={workers}")
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
    from benchmarks import triton_side
    from builders.ctr_onnx import auc
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

    make = loadgen.http_json_caller(port, INFER_PATH, triton_body)
    levels, cores, stats = _timed_levels(make, requests, knobs, "served", snapshot)
    systems = [
        System(
            WORKLOAD,
            "triton_python_load",
            f"{label}, HTTP/JSON, Python load generator",
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
            measured, pa_stats, failures = triton_side.sweep(
                server, WORKLOAD, data, knobs.levels, knobs.perf_analyzer, out, STEPS
            )
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
        make = loadgen.http_json_caller(server.options.http_port, f"/v2/models/{model}/infer", body)
        one = dataclasses.replace(knobs, levels=(knobs.steps_level,))
        pairs = list(zip(requests, reference, strict=True))
        levels, cores, _ = _timed_levels(make, pairs, one, model)
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

    from tritonrepo.launcher import ServerOptions, TritonServer, free_port

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError(
            f"no CUDA GPU visible to PyTorch {torch.__version__}: run on the GPU host, or pass "
            "device='cpu' (--device cpu) to exercise the harness"
        )
    config = model_config_name or ("torch_gpu" if device.startswith("cuda") else "cpu")
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


def _measured(level: Measurement | None) -> bool:
    return level is not None and level.throughput > 0  # 0: nothing answered in the window


def _verdict(ratio: float, goal: float) -> str:
    return "met" if ratio >= goal else f"missed by {100 * (1 - ratio / goal):.0f} %"


def summary(systems: list[System]) -> list[str]:
    """Markdown lines: served vs naive at c=16 (goal ≥ 5×, and p99), served peak vs the best
    in-process batch of the served precision (goal ≥ 1.0×), and the steps' time per request."""
    find = {s.key: s for s in systems}
    served_s = find.get("triton_python_load")
    naives = [s for s in systems if s.key.startswith("naive_") and _measured(s.at(16))]
    local = [s for s in systems if s.load == IN_PROCESS and s.levels]
    lines = ["## ctr_ranking (torch_gpu) targets", ""]
    if not served_s or not _measured(served_s.at(16)) or not naives or not local:
        return [
            *lines,
            "Not evaluated: a system has no answered request at c=16 (see the log).",
            "",
        ]
    s16 = served_s.at(16)
    best_naive = max(naives, key=lambda s: s.at(16).throughput)
    for n in naives:
        ratio = s16.throughput / n.at(16).throughput
        lower = "lower" if s16.p99_ms < n.at(16).p99_ms else "**not lower**"
        goal = (
            f"goal ≥ {GOAL_VS_NAIVE:g}×: {_verdict(ratio, GOAL_VS_NAIVE)}, judged against the "
            "faster naive layout"
            if n is best_naive
            else "for reference: the slower naive layout"
        )
        lines.append(
            f"- Served vs {n.name} at c=16: {s16.throughput:.0f} vs {n.at(16).throughput:.0f} "
            f"users/s, **{ratio:.2f}×** ({goal}); p99 {s16.p99_ms:.1f} vs "
            f"{n.at(16).p99_ms:.1f} ms: {lower}."
        )
    precision = "fp16" if served_s.values.get("fp16") else "fp32"
    same = [s for s in local if s.key.startswith(f"torch_{precision}_")] or local
    base = max(same, key=lambda s: s.levels[0].throughput)
    peaks = [(s.peak(), s) for s in systems if s.key.startswith("triton_") and s.peak()]
    peak, by = max(peaks, key=lambda p: p[0].throughput)
    ratio = peak.throughput / base.levels[0].throughput
    lines.append(
        f"- Served peak ({by.name}, c={peak.concurrency}) {peak.throughput:.0f} users/s vs "
        f"{base.name} {base.levels[0].throughput:.0f} users/s: **{ratio:.2f}×** (goal ≥ "
        f"{GOAL_VS_IN_PROCESS:g}×: {_verdict(ratio, GOAL_VS_IN_PROCESS)})."
    )
    fastest = max(local, key=lambda s: s.levels[0].throughput)
    if fastest is not base:
        lines.append(
            f"- Fastest in-process: {fastest.name}, {fastest.levels[0].throughput:.0f} users/s."
        )
    steps = []
    for m in STEPS[1:]:
        queue = served_s.values.get(f"{m}.queue_ms")
        if queue is None:
            continue
        compute = sum(served_s.values[f"{m}.{k}_ms"] for k in ("input", "infer", "output"))
        part = f"{m} queue {queue:.2f} / compute {compute:.2f}"
        if m != spec.CORE_MODEL and compute > 0:  # one request per execution
            ceiling = served_s.values.get(f"{m}.instances", 1.0) * 1e3 / compute
            part += f" (≤ {ceiling:.0f} req/s)"
        steps.append(part)
    if steps:
        lines.append(
            "- Steps at c=16, ms per request (ceiling: instances / compute): " + "; ".join(steps)
        )
    alone = [s for s in systems if s.key.startswith("step_") and s.peak()]
    if alone:
        lines.append(
            "- Python steps driven alone: "
            + ", ".join(
                f"{s.name} {s.peak().throughput:.0f} req/s at c={s.peak().concurrency}"
                for s in alone
            )
            + f" (served peak {peak.throughput:.0f})."
        )
    return [*lines, ""]


def main(argv: list[str] | None = None) -> int:
    from benchmarks import report

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
