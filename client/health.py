"""Liveness and readiness checks that mean something: a real inference on each ensemble.

A server can report READY while a model cannot serve (a broken step, a stub that died), so
readiness here is: server ready, each model READY, and a probe inference whose output is
checked. Used by ``tritonrepo-client health`` (exit status for container health checks) and by
the launcher before it reports "ready".
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from tritonrepo_client.connection import ClientError, TritonConnection

DEFAULT_MODELS = ("text_embedding", "ctr_ranking", "ctr_session")


@dataclass(frozen=True)
class Check:
    """One check's outcome; ``detail`` says what was seen."""

    name: str
    ok: bool
    detail: str


def probe_text_embedding(conn: TritonConnection, model: str) -> str:
    """Embed one sentence; the output must be FP32 ``[1, 384]``, finite, of unit L2 norm.

    Raises:
        ClientError: the inference failed or its output is wrong.
    """
    out = conn.infer(model, {"TEXT": np.array([[b"health check"]], dtype=object)}, ["EMBEDDING"])
    emb = out["EMBEDDING"]
    if emb is None or emb.shape != (1, 384) or emb.dtype != np.float32:
        shape = None if emb is None else emb.shape
        raise ClientError(f"EMBEDDING has shape {shape}, expected (1, 384) FP32")
    norm = float(np.linalg.norm(emb))
    if not np.isfinite(emb).all() or abs(norm - 1.0) > 1e-3:
        raise ClientError(f"EMBEDDING is not a unit vector (norm {norm:.4f})")
    return f"1x384 embedding, norm {norm:.4f}"


def _check_ranking(ids: np.ndarray, scores: np.ndarray, candidates: list[int], k: int) -> str:
    if ids is None or scores is None or ids.shape != (k,) or scores.shape != (k,):
        raise ClientError(f"expected {k} ranked items, got ITEM_IDS {getattr(ids, 'shape', None)}")
    if not set(ids.tolist()) <= set(candidates):
        raise ClientError(f"ITEM_IDS {ids.tolist()} are not among the candidates {candidates}")
    if not (np.isfinite(scores).all() and (scores > 0).all() and (scores < 1).all()):
        raise ClientError(f"SCORES {scores.tolist()} are not probabilities")
    if (np.diff(scores) > 0).any():
        raise ClientError(f"SCORES {scores.tolist()} are not in descending order")
    return f"{k} candidates ranked, top CTR {float(scores[0]):.4f}"


PROBE_CANDIDATES = [11, 222, 3333]


def probe_ctr_ranking(conn: TritonConnection, model: str) -> str:
    """Rank 3 candidates with TOP_K 2; 2 of them must come back, CTRs in (0, 1), descending.

    Raises:
        ClientError: the inference failed or its output is wrong.
    """
    out = conn.infer(
        model,
        {
            "HISTORY": np.array([5, 50, 500], dtype=np.int64),
            "CANDIDATES": np.array(PROBE_CANDIDATES, dtype=np.int64),
            "TOP_K": np.array([2], dtype=np.int32),
        },
        ["ITEM_IDS", "SCORES"],
    )
    return _check_ranking(out["ITEM_IDS"], out["SCORES"], PROBE_CANDIDATES, 2)


def probe_ctr_session(conn: TritonConnection, model: str) -> str:
    """A one-event session (START and END in one request, a random string correlation ID):
    all 3 candidates ranked, CTRs in (0, 1), descending; the session leaves no state behind.

    Raises:
        ClientError: the inference failed or its output is wrong.
    """
    out = conn.infer(
        model,
        {"ITEM_ID": np.array([5], dtype=np.int64), "CANDIDATES": np.array(PROBE_CANDIDATES)},
        ["ITEM_IDS", "SCORES"],
        sequence_id=f"health-{secrets.token_hex(8)}",
        sequence_start=True,
        sequence_end=True,
    )
    return _check_ranking(out["ITEM_IDS"], out["SCORES"], PROBE_CANDIDATES, 3)


# Probe inference per model name; models without one are checked for readiness only.
PROBES: dict[str, Callable[[TritonConnection, str], str]] = {
    "text_embedding": probe_text_embedding,
    "ctr_ranking": probe_ctr_ranking,
    "ctr_session": probe_ctr_session,
}


def check_health(
    conn: TritonConnection, models: Sequence[str] = DEFAULT_MODELS, live_only: bool = False
) -> list[Check]:
    """Run the checks in order, stopping at the first failure.

    Args:
        conn: connection to the server.
        models: models whose readiness (and probe inference, where one is known) is checked.
        live_only: only the liveness check (the process answers).

    Returns:
        The checks run; all ``ok`` means healthy.
    """
    checks: list[Check] = []

    def run(name: str, fn: Callable[[], tuple[bool, str]]) -> bool:
        start = time.perf_counter()
        try:
            ok, detail = fn()
        except ClientError as exc:
            ok, detail = False, str(exc)
        ms = (time.perf_counter() - start) * 1e3
        checks.append(Check(name, ok, f"{detail} ({ms:.1f} ms)" if ok else detail))
        return ok

    def state(value: bool, subject: str, what: str) -> tuple[bool, str]:
        return value, f"{subject} is {what}" if value else f"{subject} is not {what}"

    if not run("live", lambda: state(conn.server_live(), "server", "live")) or live_only:
        return checks
    if not run("ready", lambda: state(conn.server_ready(), "server", "ready")):
        return checks
    for model in models:
        if not run(f"{model} ready", lambda m=model: state(conn.model_ready(m), "model", "READY")):
            return checks
        probe = PROBES.get(model)
        if probe and not run(f"{model} inference", lambda m=model, p=probe: (True, p(conn, m))):
            return checks
    return checks
