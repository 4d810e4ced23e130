"""Logits → the top-K classes with softmax probabilities (``image_postprocess`` and the
in-process reference share it)."""

from __future__ import annotations

import numpy as np

from tritonrepo.image import spec
from tritonrepo.step.errors import InvalidRequest


def softmax(logits: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, computed in FP64 and returned as FP32 (same shape)."""
    x = np.asarray(logits, dtype=np.float64)
    x = np.exp(x - x.max(axis=-1, keepdims=True))
    return (x / x.sum(axis=-1, keepdims=True)).astype(np.float32)


def check_top_k(values: np.ndarray | None) -> int:
    """The request's K from its optional ``TOP_K`` INT32 ``[b, 1]`` (or ``[1]``) tensor.

    Returns:
        K (``spec.DEFAULT_TOP_K`` when absent), cut to ``spec.NUM_CLASSES``.

    Raises:
        InvalidRequest: a value ≤ 0, or different values within one request.
    """
    if values is None or np.asarray(values).size == 0:
        return spec.DEFAULT_TOP_K
    flat = np.asarray(values).reshape(-1)
    if np.any(flat != flat[0]):
        raise InvalidRequest(f"TOP_K must be the same for every image of a request, got {flat}")
    k = int(flat[0])
    if k <= 0:
        raise InvalidRequest(f"TOP_K must be > 0, got {k}")
    return min(k, spec.NUM_CLASSES)


def top_k(logits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` most probable classes per row.

    Args:
        logits: FP32 ``[n, classes]``.
        k: 1..classes.

    Returns:
        ``(indices INT64 [n, k], probabilities FP32 [n, k])``, by probability descending (ties:
        lower class index first).
    """
    probs = softmax(logits)
    order = np.argsort(-probs, axis=-1, kind="stable")[:, :k]
    return order.astype(np.int64), np.take_along_axis(probs, order, axis=-1)
