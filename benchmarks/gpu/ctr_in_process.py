"""PyTorch in one process for the ``ctr_ranking`` benchmark (:mod:`benchmarks.gpu.ctr`): the
same per-user feature work as ``ctr_preprocess`` and ``ctr_postprocess`` around one forward
per group of users, timed per forward."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from benchmarks.gpu.ctr_checks import AUC_ROWS, CANDIDATES, WORKLOAD
from benchmarks.harness.inputs import RankRequest
from benchmarks.harness.loadgen import Measurement
from benchmarks.harness.results import IN_PROCESS, System
from reference_data.click_log import ClickLog
from tritonrepo.ctr import spec
from tritonrepo.ctr.features import check_candidates, check_history, history_window, model_rows
from tritonrepo.ctr.ranking import top_k
from tritonrepo.paths import BUILD_DIR

if TYPE_CHECKING:
    from benchmarks.gpu.ctr import Knobs


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

    from builders.onnx_export import ctr_network
    from builders.onnx_export.ctr import auc

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
