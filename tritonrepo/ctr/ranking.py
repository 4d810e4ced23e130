"""Rank candidates by predicted CTR (the logic of ``ctr_postprocess``)."""

from __future__ import annotations

import numpy as np


def top_k(candidates: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best candidates by score, descending; ties keep the request's order.

    Args:
        candidates: INT64 ``[n]`` item ids as requested (out-of-vocabulary ids are returned
            unchanged).
        scores: FP32 ``[n]`` or ``[n, 1]`` CTR per candidate.
        k: > 0; cut to ``n`` when larger.

    Returns:
        ``(item_ids INT64 [min(k, n)], scores FP32 [min(k, n)])``.

    Raises:
        ValueError: ``candidates`` and ``scores`` differ in length.
    """
    flat = np.asarray(scores, dtype=np.float32).reshape(-1)
    if len(flat) != len(candidates):
        raise ValueError(f"{len(candidates)} candidates but {len(flat)} scores")
    order = np.argsort(-flat, kind="stable")[:k]
    return np.asarray(candidates, dtype=np.int64)[order], flat[order]
