"""Model inputs from raw item ids (the logic of ``ctr_preprocess`` and ``ctr_session``)."""

from __future__ import annotations

import numpy as np

from tritonrepo.ctr import spec
from tritonrepo.step.errors import InvalidRequest, OverLimit


def to_vocabulary(item_ids: np.ndarray) -> np.ndarray:
    """Map ids outside ``[MIN_ITEM_ID, MAX_ITEM_ID]`` (1..9999) to ``spec.OOV_ID``.

    Args:
        item_ids: integer array, any shape.

    Returns:
        INT64 array of the same shape.
    """
    ids = np.asarray(item_ids, dtype=np.int64)
    return np.where((ids >= spec.MIN_ITEM_ID) & (ids <= spec.MAX_ITEM_ID), ids, spec.OOV_ID)


def history_window(history: np.ndarray) -> np.ndarray:
    """The last 63 items of ``history`` (newest last), in vocabulary, left-padded with 0.

    Args:
        history: INT64 ``[n]`` item ids, any ``n >= 0``.

    Returns:
        INT64 ``[63]``.
    """
    window = np.full(spec.HISTORY_LENGTH, spec.PAD_ID, dtype=np.int64)
    recent = to_vocabulary(np.asarray(history, dtype=np.int64).reshape(-1))[-spec.HISTORY_LENGTH :]
    if len(recent):
        window[-len(recent) :] = recent
    return window


def model_row(history: np.ndarray, candidate: int) -> np.ndarray:
    """One model input: ``history_window(history)`` followed by the candidate. INT64 ``[64]``."""
    return np.append(history_window(history), to_vocabulary(np.int64(candidate)))


def model_rows(window: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """One ``input_ids`` row per candidate sharing one history window.

    Args:
        window: INT64 ``[63]`` from :func:`history_window`.
        candidates: INT64 ``[n]`` raw candidate ids.

    Returns:
        INT64 ``[n, 64]``.
    """
    rows = np.empty((len(candidates), spec.SEQ_LENGTH), dtype=np.int64)
    rows[:, : spec.HISTORY_LENGTH] = window
    rows[:, spec.HISTORY_LENGTH] = to_vocabulary(candidates)
    return rows


def check_candidates(candidates: np.ndarray, name: str = "CANDIDATES") -> np.ndarray:
    """Validate a request's candidate ids.

    Args:
        candidates: INT64 array holding 1..512 ids (any shape; flattened).

    Returns:
        INT64 ``[n]``.

    Raises:
        InvalidRequest: no candidate; :class:`~tritonrepo.step.errors.OverLimit` (a subclass): more
            than ``spec.MAX_CANDIDATES`` (512).
    """
    flat = np.asarray(candidates, dtype=np.int64).reshape(-1)
    if not 1 <= len(flat) <= spec.MAX_CANDIDATES:
        error = OverLimit if len(flat) > spec.MAX_CANDIDATES else InvalidRequest
        raise error(f"{name} must hold 1 to {spec.MAX_CANDIDATES} item ids, got {len(flat)}")
    return flat


def check_history(history: np.ndarray, name: str = "HISTORY") -> np.ndarray:
    """Validate a request's history ids (newest last).

    Args:
        history: INT64 array holding 0..``spec.MAX_HISTORY`` (4096) ids (any shape; flattened).

    Returns:
        INT64 ``[h]``.

    Raises:
        OverLimit: more than ``spec.MAX_HISTORY`` ids (the message gives the count and says
            that only the last 63 are used).
    """
    flat = np.asarray(history, dtype=np.int64).reshape(-1)
    if len(flat) > spec.MAX_HISTORY:
        raise OverLimit(
            f"{name} must hold at most {spec.MAX_HISTORY} item ids, got {len(flat)}; only the "
            f"last {spec.HISTORY_LENGTH} are used, so send the most recent ones"
        )
    return flat


def check_top_k(top_k: np.ndarray | None) -> int:
    """The request's ``TOP_K`` (INT32 ``[1]``, optional; default ``spec.DEFAULT_TOP_K``).

    Any value from 1 to 2**31 - 1 is accepted; one above the number of candidates ``n`` is cut
    to ``n`` later (:func:`tritonrepo.ctr.ranking.top_k`).

    Returns:
        The value as a Python int, ≥ 1.

    Raises:
        InvalidRequest: not exactly one value, or a value ≤ 0.
    """
    if top_k is None:
        return spec.DEFAULT_TOP_K
    flat = np.asarray(top_k).reshape(-1)
    if len(flat) != 1:
        raise InvalidRequest(f"TOP_K must hold exactly one value, got {len(flat)}")
    if int(flat[0]) <= 0:
        raise InvalidRequest(f"TOP_K must be > 0, got {int(flat[0])}")
    return int(flat[0])
