"""Sample requests of the toy pipeline: 8 rows; row 3 is the smallest request (a 2-byte,
non-UTF-8 tag), so it is the health probe's row."""

from __future__ import annotations

import numpy as np

SMALLEST_ROW = 3
BINARY_TAG = b"\xff\x00"  # not UTF-8: the probe sends it as {"b64": ...}


def samples() -> dict[str, np.ndarray]:
    """``X`` FP32 [8, 4] (0.1 steps) and ``TAG`` BYTES [8, 1]."""
    x = (np.arange(32, dtype=np.float32) / np.float32(10)).reshape(8, 4)
    tags = [f"tag-{i}-{'x' * i}".encode() for i in range(8)]
    tags[SMALLEST_ROW] = BINARY_TAG
    return {"X": x, "TAG": np.array(tags, dtype=object).reshape(8, 1)}


def utf8_samples() -> dict[str, np.ndarray]:
    """As :func:`samples` but every tag is UTF-8 text; row 0 (``b"\\xc3\\xa9"``, é) is smallest."""
    out = samples()
    out["TAG"] = out["TAG"].copy()
    out["TAG"][0, 0] = "é".encode()
    out["TAG"][SMALLEST_ROW, 0] = b"tag-three-long"
    return out


def four_samples() -> dict[str, np.ndarray]:
    """Only 4 rows: too few for the batch parity check."""
    return {name: value[:4] for name, value in samples().items()}
