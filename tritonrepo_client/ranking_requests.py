"""Requests and answers of the CTR models, without I/O: what the ranking and session clients
(threads and asyncio) send and read.

Tensors (model_repository/ctr_ranking and ctr_session configs): ``HISTORY`` INT64 ``[h]`` (item
ids, newest last), ``CANDIDATES`` INT64 ``[n]`` (1..512 ids), optional ``TOP_K`` INT32 ``[1]``;
a session event sends ``ITEM_ID`` INT64 ``[1]`` and ``CANDIDATES``. Answers: ``ITEM_IDS``
INT64 ``[k]`` and ``SCORES`` FP32 ``[k]`` (CTR), descending.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

OUTPUTS = ["ITEM_IDS", "SCORES"]


@dataclass(frozen=True)
class Ranking:
    """Ranked candidates: ``item_ids`` INT64 ``[k]`` and their CTR ``scores`` FP32 ``[k]``,
    descending."""

    item_ids: np.ndarray
    scores: np.ndarray

    def as_dict(self) -> dict[str, list]:
        """JSON-ready ``{"item_ids": [...], "scores": [...]}``."""
        return {
            "item_ids": [int(i) for i in self.item_ids],
            "scores": [round(float(s), 6) for s in self.scores],
        }


def item_ids(values: Sequence[int] | np.ndarray, name: str) -> np.ndarray:
    """``values`` as INT64 ``[n]``.

    Raises:
        ValueError: not integers (``name`` is named).
    """
    array = np.asarray(values)
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"{name} must be integer item ids, got dtype {array.dtype}")
    return array.astype(np.int64).reshape(-1)


def is_id(value: object) -> bool:
    """Whether ``value`` is an integer item id (a Python or numpy int, not a bool)."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def rank_request(
    history: Sequence[int] | np.ndarray,
    candidates: Sequence[int] | np.ndarray,
    top_k: int | None,
) -> dict[str, np.ndarray]:
    """``ctr_ranking``'s inputs: ``HISTORY`` INT64 ``[h]``, ``CANDIDATES`` INT64 ``[n]`` and,
    when ``top_k`` is given, ``TOP_K`` INT32 ``[1]`` (the server's default is 10; the server
    checks 1..512 candidates and ``top_k`` >= 1).

    Raises:
        ValueError: ids are not integers.
    """
    inputs = {
        "HISTORY": item_ids(history, "history"),
        "CANDIDATES": item_ids(candidates, "candidates"),
    }
    if top_k is not None:
        inputs["TOP_K"] = np.array([top_k], dtype=np.int32)
    return inputs


def ranking(answer: dict[str, np.ndarray]) -> Ranking:
    """``ITEM_IDS`` INT64 ``[k]`` and ``SCORES`` FP32 ``[k]`` → :class:`Ranking`."""
    return Ranking(answer["ITEM_IDS"], answer["SCORES"])


def event_request(
    correlation_id: Hashable,
    started: bool,
    ended: bool,
    item_id: int,
    candidates: Sequence[int] | np.ndarray,
    end: bool,
    timeout_s: float | None,
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """``(inputs, infer options)`` of one session event: ``ITEM_ID`` INT64 ``[1]``,
    ``CANDIDATES`` INT64 ``[n]``; START on the first (``started`` False), END when ``end``,
    never retried (the server may have recorded a lost answer's event).

    Raises:
        RuntimeError: the session has ended.
        ValueError: ids are not integers.
    """
    if ended:
        raise RuntimeError(f"session {correlation_id!r} has ended")
    if not is_id(item_id):
        raise ValueError(
            f"item_id must be an integer item id, got {item_id!r} ({type(item_id).__name__})"
        )
    inputs = {
        "ITEM_ID": np.array([item_id], dtype=np.int64),
        "CANDIDATES": item_ids(candidates, "candidates"),
    }
    options = {
        "timeout_s": timeout_s,
        "retry": False,
        "sequence_id": correlation_id,
        "sequence_start": not started,
        "sequence_end": end,
    }
    return inputs, options
