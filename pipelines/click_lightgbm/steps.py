"""Pre- and postprocessing of the click_lightgbm pipeline (plain numpy, batch-first)."""

import numpy as np

# The columns of FEATURES, in order, with the closed range each must lie in (units in the name).
COLUMNS = (
    ("position", 1.0, 10.0),  # slot on the page, 1 = top
    ("hour", 0.0, 23.0),  # local hour of the impression
    ("device", 0.0, 2.0),  # 0 desktop, 1 phone, 2 tablet
    ("user_clicks_7d", 0.0, 1e4),  # the user's clicks over the last 7 days
    ("user_views_7d", 0.0, 1e5),  # the user's ad views over the last 7 days
    ("ad_ctr_30d", 0.0, 1.0),  # the ad's click-through rate over the last 30 days
    ("price_usd", 0.0, 1e5),  # the advertised item's price
    ("query_match", 0.0, 1.0),  # text similarity of the ad to the user's query
    ("ad_age_days", 0.0, 3650.0),  # days since the ad was created
    ("returning_user", 0.0, 1.0),  # 1 if the user has visited before
)
N_FEATURES = len(COLUMNS)
LOW = np.array([c[1] for c in COLUMNS])
HIGH = np.array([c[2] for c in COLUMNS])


def preprocess(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Validate the impression features and hand them to the model.

    Args:
        inputs: ``FEATURES`` FP32 ``[b, 10]``, columns as :data:`COLUMNS`.

    Returns:
        ``features`` FP32 ``[b, 10]``, the same values (the model was trained on them as given).

    Raises:
        ValueError: the tensor is not ``[b, 10]``, or a value is not finite or lies outside its
            column's range in :data:`COLUMNS` (the message names the row and the column).
    """
    x = np.asarray(inputs["FEATURES"], dtype=np.float32)
    if x.ndim != 2 or x.shape[1] != N_FEATURES:
        raise ValueError(f"FEATURES must be [b, {N_FEATURES}], got {list(x.shape)}")
    bad = ~np.isfinite(x) | (x < LOW) | (x > HIGH)
    if bad.any():
        row, col = np.argwhere(bad)[0]
        name, low, high = COLUMNS[col]
        raise ValueError(
            f"FEATURES row {row} column {col} ({name}): {x[row, col]} is not in [{low:g}, {high:g}]"
        )
    return {"features": x}


def postprocess(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Turn the classifier's outputs into the response.

    Args:
        inputs: ``label`` INT64 ``[b]`` (1 = click) and ``probabilities`` FP32 ``[b, 2]``
            (columns: no click, click).

    Returns:
        ``CLICK_PROBABILITY`` FP32 ``[b, 1]``, in [0, 1].
    """
    proba = np.asarray(inputs["probabilities"], dtype=np.float32)
    return {"CLICK_PROBABILITY": proba[:, 1:2].copy()}
