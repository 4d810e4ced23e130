"""Sample requests for the breast_cancer pipeline: rows of the held-out split."""

import numpy as np

from pipelines.breast_cancer.model import split


def samples() -> dict[str, np.ndarray]:
    """The first 16 held-out rows: ``MEASUREMENTS`` FP32 ``[16, 30]``."""
    return {"MEASUREMENTS": split()[1][:16]}
