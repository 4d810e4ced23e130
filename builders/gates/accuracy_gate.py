"""Accuracy gate of a built engine: compare it with ONNX Runtime FP32 on real samples.

The gate runs two Polygraphy runners side by side on the same feeds
(``polygraphy.comparator.Comparator.run(..., streaming=True)``): the *reference*, ONNX Runtime
FP32 on the model's ONNX export, and the *candidate*, any Polygraphy runner — a TensorRT engine
(``polygraphy.backend.trt.TrtRunner``, in the plan builder) or another ONNX Runtime session
(:func:`onnxrt_runner`, which is how CI tests this code on the CPU INT8 artifacts). It measures
(:func:`measure`) and then judges the figures against a per-precision tolerance (:func:`judge`);
:func:`run_gate` does both.

Figures per model (feeds from ``builders.tensorrt.plan_data``):

* ``text_embedding_encoder``: cosine of the sentence embeddings (the graph's masked mean,
  L2-normalised by ``tritonrepo.text.pooling.l2_normalize``: what the ensemble returns), min
  and mean over 256 real eval texts in dynamic batches of 32.
* ``ctr_model``: max abs CTR difference (CTR is a probability, unitless) and held-out AUC of
  both (``builders.onnx_export.ctr.auc``) on 4,096 held-out click-log rows.
* ``ctr_session``: the same on 512 held-out users with 8 candidates each (scores matched to
  candidates by id; AUC on each user's own candidate), plus: ``HISTORY_OUT`` must equal the
  reference exactly (integer state) and ``SCORES`` must be sorted descending.

Tolerances (``TOLERANCES``), with their sources:

* FP32 (TF32 off, Polygraphy's default): min cosine 0.99999 (FP32 kernels of two runtimes
  differ in rounding only), CTR max abs diff 1e-5 (the ONNX vs PyTorch parity bar of
  ``builders/onnx_export/ctr.py``), |ΔAUC| <= 0.0005.
* FP16: min cosine 0.999 (set before any FP16 build was measured; seen 0.999999 with the
  torch_gpu FP16 encoder on an H200); CTR max abs diff 2e-3 (CTR read to three decimals) and |ΔAUC|
  <= 0.002. The torch_gpu FP16 CTR program measured 2.8e-3 on an H200 and so is built in FP32 there
  (``builders/torch_programs/export.py`` falls back; for plans use ``--precision fp32``). The same
  table serves both builders (``builders.torch_programs.export`` imports it).
* INT8: min cosine 0.99 (the floor the CPU INT8 text encoder is built to,
  ``text_embedding_variants.INT8_MIN_COSINE``); CTR max abs diff 0.05 and |ΔAUC| <= 0.005. The
  CPU INT8 ctr_model (version 2, QDQ projections) measures 0.025 max abs diff and ΔAUC -0.0003
  against FP32 on the gate rows; TensorRT's implicit INT8 also quantizes other layers, so the bar
  is twice the CPU figure, with AUC, the figure users see, held to 0.005.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from tritonrepo.ctr import spec as ctr_spec
from tritonrepo.text import spec as text_spec

Feed = dict[str, np.ndarray]


@dataclass(frozen=True)
class Tolerance:
    """What a candidate must reach against FP32.

    Attributes:
        min_cosine: text encoder, lowest cosine of a pooled embedding (1 = identical).
        max_ctr_diff: CTR models, largest |CTR - FP32 CTR| over the gate samples.
        max_auc_change: CTR models, largest |AUC - FP32 AUC|.
    """

    min_cosine: float
    max_ctr_diff: float
    max_auc_change: float


TOLERANCES = {
    "fp32": Tolerance(min_cosine=0.99999, max_ctr_diff=1e-5, max_auc_change=0.0005),
    "fp16": Tolerance(min_cosine=0.999, max_ctr_diff=2e-3, max_auc_change=0.002),
    "int8": Tolerance(min_cosine=0.99, max_ctr_diff=0.05, max_auc_change=0.005),
}


class GateFailed(RuntimeError):
    """The candidate is less accurate than the tolerance allows; the message gives the figures
    and the limits."""


def onnxrt_runner(path: Path, name: str):
    """A Polygraphy ONNX Runtime runner on CPU for the ONNX file ``path``.

    Raises:
        polygraphy.exception.PolygraphyException: when activated, if the file cannot be loaded.
    """
    from polygraphy.backend.onnxrt import OnnxrtRunner, SessionFromOnnx

    return OnnxrtRunner(SessionFromOnnx(str(path), providers=["cpu"]), name=name)


def paired_outputs(reference, candidate, feeds: Sequence[Feed]) -> Iterator[tuple[dict, dict]]:
    """Run both runners on each feed (Polygraphy ``Comparator.run``, streaming: one feed at a
    time, both runners active); yields ``(reference outputs, candidate outputs)`` per feed as
    FP32/INT64 numpy copies (FP16 outputs are widened to FP32)."""
    from polygraphy.comparator import Comparator
    from polygraphy.logger import G_LOGGER

    def host(outputs) -> dict[str, np.ndarray]:
        copied = {}
        for k, v in outputs.items():
            array = np.array(v, copy=True)
            copied[k] = array.astype(np.float32) if array.dtype == np.float16 else array
        return copied

    with G_LOGGER.verbosity(G_LOGGER.WARNING):  # not one INFO block per feed
        for results in Comparator.run([reference, candidate], data_loader=feeds, streaming=True):
            ((_, (ref,)), (_, (cand,))) = list(results.items())
            yield host(ref), host(cand)


def _text(reference, candidate, feeds: Sequence[Feed]) -> dict:
    from tritonrepo.text.pooling import l2_normalize

    cosines = []
    outputs = paired_outputs(reference, candidate, feeds)
    for _feed, (ref, cand) in zip(feeds, outputs, strict=True):
        a = l2_normalize(ref[text_spec.ENCODER_OUTPUT])
        b = l2_normalize(cand[text_spec.ENCODER_OUTPUT])
        cosines.append((a * b).sum(axis=1))
    cos = np.concatenate(cosines)
    return {
        "min_cosine": float(cos.min()),
        "mean_cosine": float(cos.mean()),
        "texts": len(cos),
    }


def auc(clicks: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve: the probability that a clicked row scores above an unclicked
    one, ties counting half (Mann-Whitney U over average ranks). Equals
    ``sklearn.metrics.roc_auc_score``, which ``builders/onnx_export/ctr.py`` uses; written in numpy
    because the TensorRT builder image has no scikit-learn.

    Args:
        clicks: ``[n]`` labels in {0, 1}.
        scores: ``[n]`` scores.

    Raises:
        ValueError: only one class in ``clicks``.
    """
    clicks = np.asarray(clicks).reshape(-1) > 0.5
    scores = np.asarray(scores, np.float64).reshape(-1)
    positives, negatives = int(clicks.sum()), int((~clicks).sum())
    if not positives or not negatives:
        raise ValueError("AUC needs clicked and unclicked rows")
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    # Average the ranks of tied scores.
    sorted_scores = scores[order]
    starts = np.flatnonzero(np.r_[True, sorted_scores[1:] != sorted_scores[:-1]])
    ends = np.r_[starts[1:], len(scores)]
    for a, b in zip(starts, ends, strict=True):
        if b - a > 1:
            ranks[order[a:b]] = (a + 1 + b) / 2
    return float((ranks[clicks].sum() - positives * (positives + 1) / 2) / (positives * negatives))


def _ctr_figures(ref: np.ndarray, cand: np.ndarray, clicks: np.ndarray, own: np.ndarray) -> dict:
    ref_auc, cand_auc = auc(clicks, ref[own]), auc(clicks, cand[own])
    diff = np.abs(ref - cand)
    return {
        "max_abs_ctr_diff": float(diff.max()),
        "mean_abs_ctr_diff": float(diff.mean()),
        "auc_fp32": round(ref_auc, 5),
        "auc": round(cand_auc, 5),
        "auc_change": round(cand_auc - ref_auc, 5),
        "rows": len(ref),
    }


def _ctr(reference, candidate, feeds: Sequence[Feed], clicks: np.ndarray) -> dict:
    ref, cand = [], []
    for a, b in paired_outputs(reference, candidate, feeds):
        ref.append(a[ctr_spec.CORE_OUTPUT].reshape(-1))
        cand.append(b[ctr_spec.CORE_OUTPUT].reshape(-1))
    ref_all, cand_all = np.concatenate(ref), np.concatenate(cand)
    return _ctr_figures(ref_all, cand_all, clicks, np.arange(len(ref_all)))


def scores_by_candidate(candidates: np.ndarray, item_ids: np.ndarray, scores: np.ndarray):
    """``ctr_session``'s ranked output put back in request order: FP32 ``[n]``, the score of
    each of ``candidates`` (INT64 ``[n]``). Equal ids carry equal scores (same row), so matching
    by id is exact.

    Raises:
        ValueError: ``item_ids`` is not a permutation of ``candidates``.
    """
    if sorted(item_ids.tolist()) != sorted(candidates.tolist()):
        raise ValueError(f"ITEM_IDS {item_ids.tolist()} is not a permutation of the candidates")
    by_id = dict(zip(item_ids.tolist(), scores.tolist(), strict=True))
    return np.array([by_id[c] for c in candidates.tolist()], np.float32)


def _session(reference, candidate, feeds: Sequence[Feed], clicks: np.ndarray) -> dict:
    ref, cand, own = [], [], []
    history_equal, sorted_scores = True, True
    outputs = paired_outputs(reference, candidate, feeds)
    for feed, (a, b) in zip(feeds, outputs, strict=True):
        candidates = feed["CANDIDATES"]
        own.append(sum(len(r) for r in ref))
        ref.append(scores_by_candidate(candidates, a["ITEM_IDS"], a["SCORES"]))
        cand.append(scores_by_candidate(candidates, b["ITEM_IDS"], b["SCORES"]))
        history_equal &= bool(np.array_equal(a["HISTORY_OUT"], b["HISTORY_OUT"]))
        sorted_scores &= bool((np.diff(b["SCORES"]) <= 0).all())
    figures = _ctr_figures(np.concatenate(ref), np.concatenate(cand), clicks, np.array(own))
    return figures | {"history_out_equal": history_equal, "scores_sorted": sorted_scores}


def measure(model: str, reference, candidate, data=None) -> dict:
    """Measure ``candidate`` against ``reference`` on ``model``'s real gate samples.

    Args:
        model: ``text_embedding_encoder``, ``ctr_model`` or ``ctr_session``.
        reference: Polygraphy runner of the FP32 ONNX export (:func:`onnxrt_runner`).
        candidate: Polygraphy runner of what is gated (a ``TrtRunner`` or :func:`onnxrt_runner`).
        data: the samples — a list of feeds for the text encoder, ``(feeds, clicks)`` for the
            CTR models (default: ``builders.tensorrt.plan_data.gate_data(model)``).

    Returns:
        The figures (see the module docstring), all plain JSON types.

    Raises:
        ValueError: unknown model.
    """
    from builders.tensorrt import plan_data

    data = data if data is not None else plan_data.gate_data(model)
    if model == text_spec.ENCODER_MODEL:
        return _text(reference, candidate, data)
    if model == ctr_spec.CORE_MODEL:
        return _ctr(reference, candidate, *data)
    if model == ctr_spec.SESSION_MODEL:
        return _session(reference, candidate, *data)
    raise ValueError(f"no accuracy gate for {model}")


def judge(model: str, figures: dict, tolerance: Tolerance) -> dict:
    """Check measured ``figures`` against ``tolerance``.

    Returns:
        ``figures`` with ``"tolerance"`` (the limits applied) and ``"passed": True`` added.

    Raises:
        GateFailed: a figure is beyond its limit; the message names each failing figure.
    """
    failures = []
    if model == text_spec.ENCODER_MODEL:
        if not figures["min_cosine"] >= tolerance.min_cosine:
            failures.append(f"min cosine {figures['min_cosine']:.6f} < {tolerance.min_cosine}")
        limits = {"min_cosine": tolerance.min_cosine}
    else:
        if not figures["max_abs_ctr_diff"] <= tolerance.max_ctr_diff:
            failures.append(
                f"max abs CTR diff {figures['max_abs_ctr_diff']:.2e} > {tolerance.max_ctr_diff}"
            )
        if not abs(figures["auc_change"]) <= tolerance.max_auc_change:
            failures.append(
                f"AUC change {figures['auc_change']:+.5f} beyond ±{tolerance.max_auc_change}"
            )
        if figures.get("history_out_equal") is False:
            failures.append("HISTORY_OUT differs from the reference")
        if figures.get("scores_sorted") is False:
            failures.append("SCORES are not sorted descending")
        limits = {k: v for k, v in asdict(tolerance).items() if k != "min_cosine"}
    if failures:
        raise GateFailed(
            f"{model}: accuracy gate failed vs ONNX Runtime FP32: {'; '.join(failures)}"
        )
    return figures | {"tolerance": limits, "passed": True}


def run_gate(model: str, reference, candidate, tolerance: Tolerance, data=None) -> dict:
    """:func:`measure` then :func:`judge`; returns the judged figures.

    Raises:
        GateFailed: the candidate fails ``tolerance``.
    """
    return judge(model, measure(model, reference, candidate, data), tolerance)
