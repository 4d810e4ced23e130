"""Sample sessions for the digit_stream pipeline: held-out images, one row per event."""

import numpy as np

from pipelines.digit_stream.model import split


def samples() -> list[dict[str, np.ndarray]]:
    """Four sessions, the first four held-out images: each ``{"ROW": FP32 [8, 8]}``, its rows
    top to bottom (one event each)."""
    return [{"ROW": image} for image in split()[1][:4]]
