"""The toy pipeline's steps (plain numpy, batch-first) and broken variants for the checks."""

from __future__ import annotations

import numpy as np


def preprocess(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``X`` FP32 [b, 4], ``TAG`` BYTES [b, 1] -> ``features`` FP32 [b, 4] (2 X) and
    ``TAG_LENGTH`` INT32 [b, 1] (bytes per tag)."""
    lengths = [[len(tag) for tag in row] for row in inputs["TAG"]]
    return {
        "features": (np.asarray(inputs["X"], dtype=np.float32) * 2).astype(np.float32),
        "TAG_LENGTH": np.asarray(lengths, dtype=np.int32),
    }


def postprocess(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``scores`` FP32 [b, 2], ``TAG_LENGTH`` INT32 [b, 1] -> ``SCORES`` FP32 [b, 2] and
    ``LABEL`` BYTES [b, 1] (``b"first"`` when column 0 wins, else ``b"second"``)."""
    scores = np.asarray(inputs["scores"], dtype=np.float32)
    first = scores[:, 0] >= scores[:, 1]
    label = np.where(first, b"first", b"second").astype(object).reshape(-1, 1)
    return {"SCORES": scores, "LABEL": label}


def preprocess_float64(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Like :func:`preprocess` but ``features`` is float64 (the core model takes FP32)."""
    out = preprocess(inputs)
    out["features"] = out["features"].astype(np.float64)
    return out


def preprocess_without_features(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Like :func:`preprocess` but without the core model's input ``features``."""
    out = preprocess(inputs)
    del out["features"]
    return out


def preprocess_with_extra(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Like :func:`preprocess` plus ``UNDECLARED`` FP32 [b, 1], in no description."""
    out = preprocess(inputs)
    out["UNDECLARED"] = np.zeros((len(out["features"]), 1), dtype=np.float32)
    return out


def postprocess_without_label(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Like :func:`postprocess` but without the response tensor ``LABEL``."""
    out = postprocess(inputs)
    del out["LABEL"]
    return out


def preprocess_crashing(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A preprocess with a bug: the generator names the file and line where it failed."""
    return {"features": inputs["X"] * "2"}


def postprocess_flat(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """As :func:`postprocess`, with ``LABEL`` flat ``[b]`` instead of ``[b, 1]``."""
    out = postprocess(inputs)
    return {**out, "LABEL": out["LABEL"].reshape(-1)}
