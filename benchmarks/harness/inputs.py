"""The benchmark's inputs: real mixed-length texts and held-out click-log requests.

Every system of one run gets the same inputs, in the same order:

* **Texts**: :func:`reference_data.text_corpus.real_texts` (eval split: numpy docstrings and the
  READMEs of pinned packages, 40 % short queries, 40 % paragraphs, 20 % documents).
* **Ranking requests**: user ``i`` of the click log's held-out split, with their history and a
  slate of ``CANDIDATES_PER_REQUEST`` held-out candidate items.
* **Sessions**: held-out users with at least ``SESSION_EVENTS`` history items; each session
  replays those items as events, each event ranking a slate of candidates.

``perf_analyzer`` reads them from ``--input-data`` JSON files written here, and the Python load
generator from the same lists.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from reference_data import text_corpus as corpus
from reference_data.click_log import HELDOUT_SPLIT, ClickLog, ClickLogGenerator
from tritonrepo.ctr import spec as ctr_spec

CANDIDATES_PER_REQUEST = 32  # a re-ranking slate; ctr_model's largest preferred batch size
SESSION_EVENTS = 8  # events per session
HELDOUT_ROWS = 4000  # held-out rows read for requests, sessions and the AUC


@dataclass(frozen=True)
class RankRequest:
    """One ``ctr_ranking`` request: ``history`` INT64 ``[h]`` (newest last) and ``candidates``
    INT64 ``[CANDIDATES_PER_REQUEST]``."""

    history: np.ndarray
    candidates: np.ndarray


@dataclass(frozen=True)
class SessionEvent:
    """One ``ctr_session`` request: the item the user just saw and the slate to rank."""

    item_id: int
    candidates: np.ndarray


@dataclass(frozen=True)
class CtrInputs:
    """Ranking requests, sessions, and the held-out log they come from (for the AUC)."""

    requests: list[RankRequest]
    sessions: list[list[SessionEvent]]
    heldout: ClickLog


def texts(n: int) -> list[str]:
    """``n`` real texts of mixed length (eval split, seed 0)."""
    return corpus.real_texts(n, split="eval", seed=0)


def ctr_inputs(num_requests: int, num_sessions: int) -> CtrInputs:
    """Requests and sessions from the held-out split of the build's click log.

    Raises:
        ValueError: the held-out rows cannot supply that many requests or sessions.
    """
    heldout = ClickLogGenerator().sample(HELDOUT_ROWS, HELDOUT_SPLIT)
    slates = heldout.candidates.reshape(-1, CANDIDATES_PER_REQUEST)
    if num_requests > len(slates):
        raise ValueError(f"at most {len(slates)} requests, asked for {num_requests}")
    requests = [
        RankRequest(heldout.histories[i].astype(np.int64), slates[i].astype(np.int64))
        for i in range(num_requests)
    ]
    long_enough = [h for h in heldout.histories if len(h) >= SESSION_EVENTS]
    if num_sessions > len(long_enough):
        raise ValueError(f"at most {len(long_enough)} sessions, asked for {num_sessions}")
    sessions = [
        [
            SessionEvent(int(item), slates[(s * SESSION_EVENTS + e) % len(slates)])
            for e, item in enumerate(history[:SESSION_EVENTS])
        ]
        for s, history in enumerate(long_enough[:num_sessions])
    ]
    return CtrInputs(requests, sessions, heldout)


def _tensor(values: np.ndarray | list, shape: list[int] | None = None) -> dict:
    array = np.asarray(values)
    return {"content": array.reshape(-1).tolist(), "shape": shape or list(array.shape)}


def write_text_data(path: Path, items: list[str]) -> Path:
    """perf_analyzer ``--input-data`` for ``text_embedding``: one text per request."""
    data = [{"TEXT": {"content": [t], "shape": [1]}} for t in items]
    path.write_text(json.dumps({"data": data}))
    return path


def write_token_data(path: Path, encoded: list[tuple[np.ndarray, np.ndarray]]) -> Path:
    """perf_analyzer ``--input-data`` for ``text_embedding_encoder``: per request the
    tokenizer's ``input_ids`` and ``attention_mask`` INT64 ``[seq]`` of one text."""
    data = [{"input_ids": _tensor(ids), "attention_mask": _tensor(mask)} for ids, mask in encoded]
    path.write_text(json.dumps({"data": data}))
    return path


def write_ranking_data(path: Path, requests: list[RankRequest]) -> Path:
    """perf_analyzer ``--input-data`` for ``ctr_ranking`` (``HISTORY`` may be empty)."""
    data = [
        {"HISTORY": _tensor(r.history, [len(r.history)]), "CANDIDATES": _tensor(r.candidates)}
        for r in requests
    ]
    path.write_text(json.dumps({"data": data}))
    return path


def write_rows_data(path: Path, requests: list[RankRequest]) -> Path:
    """perf_analyzer ``--input-data`` for ``ctr_model`` called directly: the ``input_ids`` rows
    INT64 ``[64]`` that ``ctr_preprocess`` would make, one batch item per entry (perf_analyzer
    sends ``-b CANDIDATES_PER_REQUEST`` of them per request)."""
    from tritonrepo.ctr.features import history_window, model_rows

    data = [
        {ctr_spec.CORE_INPUT: _tensor(row)}
        for r in requests
        for row in model_rows(history_window(r.history), r.candidates)
    ]
    path.write_text(json.dumps({"data": data}))
    return path


def write_session_data(path: Path, sessions: list[list[SessionEvent]]) -> Path:
    """perf_analyzer ``--input-data`` for ``ctr_session``: one list of steps per sequence
    (perf_analyzer sets START on the first step and END on the last)."""
    data = [
        [{"ITEM_ID": _tensor([e.item_id]), "CANDIDATES": _tensor(e.candidates)} for e in events]
        for events in sessions
    ]
    path.write_text(json.dumps({"data": data}))
    return path
