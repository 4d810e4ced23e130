"""The chain pipeline's Python steps (numpy, batch-first)."""

from __future__ import annotations

from typing import Any

import numpy as np


def prepare(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``X`` FP32 [b, 4] -> ``features`` FP32 [b, 4] (= X).

    Raises:
        ValueError: a value is not finite.
    """
    x = np.asarray(inputs["X"], dtype=np.float32)
    if not np.isfinite(x).all():
        raise ValueError("X must be finite")
    return {"features": x}


def total(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``X`` FP32 [b, 4] -> ``TOTAL`` FP32 [b, 1], the row sums (a step beside the chain)."""
    return {"TOTAL": np.asarray(inputs["X"], dtype=np.float32).sum(axis=1, keepdims=True)}


def relu(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``scores`` FP32 [b, 2] -> ``x`` FP32 [b, 2] = max(scores, 0)."""
    return {"x": np.maximum(inputs["scores"], 0).astype(np.float32)}


BAD_CALL_ABOVE = 1000.0  # a ``doubled`` value above it is sent to ``scale`` as INT64: refused


def finish(inputs: dict[str, np.ndarray], models: Any) -> dict[str, np.ndarray]:
    """``doubled`` FP32 [b, 2] -> ``OUT`` FP32 [b, 2] = ``models["scale"]`` on it; a batch
    with a value above :data:`BAD_CALL_ABOVE` makes a call the model refuses (the tests of a
    failed call)."""
    doubled = np.asarray(inputs["doubled"])
    if (doubled > BAD_CALL_ABOVE).any():
        return {"OUT": models["scale"]({"v": doubled.astype(np.int64)})["w"]}
    return {"OUT": models["scale"]({"v": doubled})["w"]}


def samples() -> dict[str, np.ndarray]:
    """``X`` FP32 [8, 4]: -1.6 to 1.5 in 0.1 steps (negative scores too: ReLU matters)."""
    return {"X": ((np.arange(32, dtype=np.float32) - 16) / np.float32(10)).reshape(8, 4)}
