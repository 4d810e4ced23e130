"""The built-in health probes of the shipped ensembles whose configs do not declare their probe
(config parameter ``tritonrepo_probe``, :mod:`tritonrepo_client.control.probe_declaration`) yet:
one real inference each, its output checked.

:data:`PROBES` is the one table of them; :data:`tritonrepo_client.models.DEFAULT_MODELS` is
its names. A declared probe takes precedence
(:func:`tritonrepo_client.control.health.probe_for`), so an entry is removed when its model's
config declares the probe, and the table ends empty once every shipped pipeline is generated
from its description (``pipelines/<name>/pipeline.toml``) with samples.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

import numpy as np

from tritonrepo_client.connection import ClientError, TritonConnection


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


def probe_png(width: int = 32, height: int = 32) -> bytes:
    """A valid 8-bit RGB PNG of a horizontal gradient, made with the standard library (the
    client needs no image library)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    row = b"\x00" + b"".join(bytes((x * 8 % 256, 128, 255 - x * 8 % 256)) for x in range(width))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(row * height))
        + chunk(b"IEND", b"")
    )


def probe_image_classification(conn: TritonConnection, model: str) -> str:
    """Classify a small PNG with TOP_K 3: 3 labels, probabilities in (0, 1], descending.

    Raises:
        ClientError: the inference failed or its output is wrong.
    """
    out = conn.infer(
        model,
        {
            "IMAGE": np.array([[probe_png()]], dtype=object),
            "TOP_K": np.array([[3]], dtype=np.int32),
        },
        ["LABELS", "SCORES"],
    )
    labels, scores = out["LABELS"], out["SCORES"]
    if labels is None or labels.shape != (1, 3) or scores is None or scores.shape != (1, 3):
        raise ClientError(
            f"LABELS/SCORES have shapes {getattr(labels, 'shape', None)}, "
            f"{getattr(scores, 'shape', None)}, expected (1, 3)"
        )
    row = scores[0]
    if (
        not (np.isfinite(row).all() and (row > 0).all() and (row <= 1).all())
        or (np.diff(row) > 0).any()
    ):
        raise ClientError(f"SCORES {row.tolist()} are not probabilities in descending order")
    top = labels[0][0]
    top = top.decode() if isinstance(top, bytes) else str(top)
    return f"3 classes, top '{top}' {row[0]:.4f}"


# Built-in probe inference per model name (module docstring). A model whose config declares its
# own probe uses that one; a model with neither is reported "ready, not probed".
PROBES: dict[str, Callable[[TritonConnection, str], str]] = {
    "text_embedding": probe_text_embedding,
    "ctr_ranking": probe_ctr_ranking,
    "ctr_session": probe_ctr_session,
    "image_classification": probe_image_classification,
}

__all__ = [
    "PROBES",
    "PROBE_CANDIDATES",
    "probe_ctr_ranking",
    "probe_ctr_session",
    "probe_image_classification",
    "probe_png",
    "probe_text_embedding",
]
