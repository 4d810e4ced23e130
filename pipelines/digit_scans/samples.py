"""Sample requests for the digit_scans pipeline: held-out scans."""

import numpy as np

from pipelines.digit_scans.model import scans


def samples() -> dict[str, np.ndarray]:
    """The first 16 held-out scans: ``IMAGE`` UINT8 ``[16, 64, 64]``."""
    return {"IMAGE": scans()[1][:16]}
