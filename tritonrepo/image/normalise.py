"""Pixel normalisation, without Pillow: the TensorRT builder image
(``builders/tensorrt/image_plan_data.py``)
normalises stored crops with the function the served step uses."""

from __future__ import annotations

import numpy as np

from tritonrepo.image.spec import Preprocessing


def normalise(pixels: np.ndarray, prep: Preprocessing) -> np.ndarray:
    """uint8 ``[..., s, s, 3]`` (HWC, RGB, 0..255) → FP32 ``[..., 3, s, s]``,
    ``(pixel - prep.mean) / prep.std`` per channel."""
    mean = np.asarray(prep.mean, dtype=np.float32)
    std = np.asarray(prep.std, dtype=np.float32)
    out = (pixels.astype(np.float32) - mean) / std
    return np.ascontiguousarray(np.moveaxis(out, -1, -3))
