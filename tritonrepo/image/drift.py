"""image_classification's input features for drift monitoring (:mod:`tritonrepo.step.drift`).

Per image: ``width`` and ``height`` in pixels (from the file's header) and ``mean_intensity``,
the mean grey level 0..255 of the image (JPEG: decoded at 1/8 scale with Pillow's ``draft``,
a fraction of a full decode; PNG and WebP: decoded whole). A camera that changes resolution or
exposure, or a feed of screenshots instead of photos, shows here.
"""

from __future__ import annotations

import io
from collections.abc import Mapping

import numpy as np
from PIL import Image

from tritonrepo.step.drift import FeatureContext

DRAFT_SCALE = 8  # JPEG draft decoding: 1/8 of each side (libjpeg's DCT scaling)


def image_features(data: bytes) -> tuple[float, float, float]:
    """``(width, height, mean_intensity)`` of one encoded image; NaNs when Pillow cannot read
    it (the step has refused such a request already)."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
            image.draft("L", (max(1, width // DRAFT_SCALE), max(1, height // DRAFT_SCALE)))
            grey = np.asarray(image.convert("L"), dtype=np.float64)
        return float(width), float(height), float(grey.mean())
    except Exception:
        return float("nan"), float("nan"), float("nan")


def features(inputs: Mapping[str, np.ndarray], context: FeatureContext) -> dict[str, np.ndarray]:
    """``width``, ``height`` and ``mean_intensity`` per image of ``IMAGE`` (BYTES ``[b, 1]``)."""
    rows = np.array([image_features(bytes(v)) for v in np.asarray(inputs["IMAGE"]).reshape(-1)])
    rows = rows.reshape(-1, 3)
    return {"width": rows[:, 0], "height": rows[:, 1], "mean_intensity": rows[:, 2]}
