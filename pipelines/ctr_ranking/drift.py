"""ctr_ranking's drift reference: users of the click log's calibration split
(``reference_data.click_log``, the world the model is trained on), one request each: the user's
history and the candidate shown. Its features: :mod:`tritonrepo.ctr.drift`."""

import numpy as np

from reference_data.click_log import CALIBRATION_SPLIT, ClickLogGenerator

REFERENCE_USERS = 5000


def reference_log(
    n: int = REFERENCE_USERS, split: int = CALIBRATION_SPLIT
) -> list[dict[str, np.ndarray]]:
    """``n`` requests drawn from the click log's ``split``: ``HISTORY`` INT64 ``[h]`` and
    ``CANDIDATES`` INT64 ``[1]``."""
    log = ClickLogGenerator().sample(n, split)
    return [
        {"HISTORY": history.astype(np.int64), "CANDIDATES": np.array([candidate], np.int64)}
        for history, candidate in zip(log.histories, log.candidates, strict=True)
    ]


def reference() -> list[dict[str, np.ndarray]]:
    """:func:`reference_log` of the calibration split."""
    return reference_log()
