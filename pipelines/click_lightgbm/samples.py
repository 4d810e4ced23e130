"""Sample requests for the click_lightgbm pipeline: rows of the held-out draw."""

import numpy as np

from pipelines.click_lightgbm.model import split


def samples() -> dict[str, np.ndarray]:
    """The first 16 held-out impressions: ``FEATURES`` FP32 ``[16, 10]``."""
    return {"FEATURES": split()[1][:16]}
