"""The session step and postprocess of the digit_stream pipeline (plain numpy, batch-first)."""

import numpy as np

SIDE = 8  # sklearn's digits are 8x8 images
MAX_PIXEL = 16.0  # their pixels are counts 0..16 (load_digits' DESCR)


def partial_image(rows: np.ndarray) -> np.ndarray:
    """FP32 ``[1, 64]``: ``rows`` (``[k, 8]``, k <= 8, the top of an image) with the rows not
    seen yet left white (0), flattened row by row like ``load_digits().data``."""
    image = np.zeros((SIDE, SIDE), dtype=np.float32)
    image[: len(rows)] = rows
    return image.reshape(1, SIDE * SIDE)


def step(state: np.ndarray | None, inputs: dict[str, np.ndarray]):
    """One row of the session's image.

    Args:
        state: the rows received so far, FP32 ``[k, 8]`` (None at the session's START).
        inputs: ``ROW`` FP32 ``[1, 8]``, pixels of 0 to 16.

    Returns:
        ``(rows, outputs)``: the rows with this one appended (the new state) and ``pixels`` FP32
        ``[1, 64]`` (the partial image for the model), ``ROWS_SEEN`` INT32 ``[1, 1]``.

    Raises:
        ValueError: the row is not 8 values of 0 to 16, or the image has all 8 rows already
            (the state is kept: end the session and start a new one).
    """
    row = np.asarray(inputs["ROW"], dtype=np.float32)
    if row.shape != (1, SIDE):
        raise ValueError(f"ROW must be [1, {SIDE}], got {list(row.shape)}")
    if not np.all(np.isfinite(row) & (row >= 0) & (row <= MAX_PIXEL)):
        raise ValueError(f"ROW values must be 0 to {MAX_PIXEL:g}, got {row.ravel().tolist()}")
    rows = row if state is None else np.concatenate([state, row])
    if len(rows) > SIDE:
        raise ValueError(f"the image already has its {SIDE} rows; end this session, start another")
    seen = np.array([[len(rows)]], dtype=np.int32)
    return rows, {"pixels": partial_image(rows), "ROWS_SEEN": seen}


def postprocess(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The classifier's outputs as the response.

    Args:
        inputs: ``label`` INT64 ``[b, 1]``, ``probabilities`` FP32 ``[b, 10]`` (the model's) and
            ``ROWS_SEEN`` INT32 ``[b, 1]`` (the step's).

    Returns:
        ``DIGIT`` INT64 ``[b, 1]``, ``PROBABILITIES`` FP32 ``[b, 10]``, ``ROWS_SEEN`` as given.
    """
    return {
        "DIGIT": np.asarray(inputs["label"], dtype=np.int64).reshape(-1, 1),
        "PROBABILITIES": np.asarray(inputs["probabilities"], dtype=np.float32),
        "ROWS_SEEN": np.asarray(inputs["ROWS_SEEN"], dtype=np.int32),
    }
