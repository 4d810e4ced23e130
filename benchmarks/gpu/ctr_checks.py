"""Requests and answer checks of the ``ctr_ranking`` benchmark (:mod:`benchmarks.gpu.ctr`): the
held-out users, the request bodies of the naive server and of Triton, and the comparison of
every system's rankings with PyTorch FP32 before anything is timed."""

from __future__ import annotations

import json
import urllib.request
from collections import Counter

import numpy as np

from benchmarks.harness import inputs
from benchmarks.harness.inputs import RankRequest
from reference_data.click_log import HELDOUT_SPLIT, ClickLog, ClickLogGenerator
from tritonrepo.ctr import spec
from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo_format.config_sets import TORCH_GPU_SET

WORKLOAD = spec.RANKING_ENSEMBLE
CANDIDATES = inputs.CANDIDATES_PER_REQUEST  # 32 per user
STEPS = (spec.RANKING_ENSEMBLE, spec.PREPROCESS_MODEL, spec.CORE_MODEL, spec.POSTPROCESS_MODEL)
AUC_ROWS = 4096  # held-out rows for the AUC: builders.torch_programs.export.GATE_ROWS
CHECKED_USERS = 16  # users whose full ranking (TOP_K = 32) is compared before timing
INFER_PATH = f"/v2/models/{spec.RANKING_ENSEMBLE}/infer"


class AnswersDiffer(RuntimeError):
    """A system's rankings or AUC differ from PyTorch FP32 by more than the tolerance."""


def ranking_users(users: int) -> tuple[list[RankRequest], ClickLog]:
    """``users`` held-out users, user ``i`` ranking candidates ``32 i .. 32 i + 31`` of the log
    (the rule of :func:`benchmarks.harness.inputs.ctr_inputs`), and the log (for the AUC)."""
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
    if model_config_name != TORCH_GPU_SET:
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
