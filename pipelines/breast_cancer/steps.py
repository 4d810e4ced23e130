"""Pre- and postprocessing of the breast_cancer pipeline (plain numpy, batch-first)."""

import numpy as np

N_MEASUREMENTS = 30
SIZE_COLUMNS = [0, 2, 3, 10, 12, 13, 20, 22, 23]  # radius, perimeter, area: mean, error, worst
CLASSES = np.array([b"malignant", b"benign"], dtype=object)  # sklearn's target_names order
MAX_MEASUREMENT = 1e5  # the data set's largest value is 4254 (worst area): far above is a unit slip


def preprocess(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Validate the measurements and derive the model's features.

    Args:
        inputs: ``MEASUREMENTS`` FP32 ``[b, 30]``, raw measurements in dataset column order.

    Returns:
        ``features`` FP32 ``[b, 33]``: the 30 measurements with the size columns log1p'd, then
        worst/mean radius, worst/mean area and mean roundness ``perimeter² / (4π·area)``.

    Raises:
        ValueError: the tensor is not ``[b, 30]``, or a value is not finite, is negative or is
            above ``MAX_MEASUREMENT`` (the message names the row and the column).
    """
    x = np.asarray(inputs["MEASUREMENTS"], dtype=np.float64)
    if x.ndim != 2 or x.shape[1] != N_MEASUREMENTS:
        raise ValueError(f"MEASUREMENTS must be [b, {N_MEASUREMENTS}], got {list(x.shape)}")
    bad = ~np.isfinite(x) | (x < 0) | (x > MAX_MEASUREMENT)
    if bad.any():
        row, col = np.argwhere(bad)[0]
        raise ValueError(
            f"MEASUREMENTS row {row} column {col}: {x[row, col]} is not in [0, {MAX_MEASUREMENT:g}]"
        )
    safe = np.maximum(x, 1e-6)
    extra = [x[:, 20] / safe[:, 0], x[:, 23] / safe[:, 3], x[:, 2] ** 2 / (4 * np.pi * safe[:, 3])]
    feats = x.copy()
    feats[:, SIZE_COLUMNS] = np.log1p(x[:, SIZE_COLUMNS])
    return {"features": np.column_stack([feats, *extra]).astype(np.float32)}


def postprocess(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Turn the classifier's outputs into the response.

    Args:
        inputs: ``label`` INT64 ``[b]`` (0 = malignant, 1 = benign) and ``probabilities``
            FP32 ``[b, 2]`` (columns in the same class order).

    Returns:
        ``DIAGNOSIS`` BYTES ``[b, 1]`` (``b"malignant"``/``b"benign"``) and
        ``PROBABILITY_MALIGNANT`` FP32 ``[b, 1]``.
    """
    label = np.asarray(inputs["label"]).reshape(-1)
    proba = np.asarray(inputs["probabilities"], dtype=np.float32)
    return {
        "DIAGNOSIS": CLASSES[label].reshape(-1, 1),
        "PROBABILITY_MALIGNANT": proba[:, :1].copy(),
    }
