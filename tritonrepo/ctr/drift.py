"""ctr_ranking's input features for drift monitoring (:mod:`tritonrepo.step.drift`).

Per request (one user, ``max_batch_size = 0``): ``history_length``, the ids in ``HISTORY``
(0..4096); ``oov_rate``, the share of the request's ids (history and candidates) outside the
vocabulary ``spec.MIN_ITEM_ID..spec.MAX_ITEM_ID``, which the model scores as the unknown id 0.
A feature pipeline that starts sending ids of another catalogue, or shifted ids, moves
``oov_rate`` off 0 at once. The candidate count is not monitored: the click log the model is
trained on has one candidate per impression, so there is no reference for it.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tritonrepo.ctr import spec
from tritonrepo.step.drift import FeatureContext


def oov_rate(ids: np.ndarray) -> float:
    """Share of ``ids`` outside ``spec.MIN_ITEM_ID..spec.MAX_ITEM_ID`` (0.0 for no ids)."""
    ids = np.asarray(ids).reshape(-1)
    if ids.size == 0:
        return 0.0
    outside = (ids < spec.MIN_ITEM_ID) | (ids > spec.MAX_ITEM_ID)
    return float(outside.mean())


def features(inputs: Mapping[str, np.ndarray], context: FeatureContext) -> dict[str, np.ndarray]:
    """``history_length`` and ``oov_rate`` of one request (``HISTORY``, ``CANDIDATES``: INT64
    ``[h]``, ``[n]``), one value each."""
    history = np.asarray(inputs["HISTORY"]).reshape(-1)
    ids = np.concatenate([history, np.asarray(inputs["CANDIDATES"]).reshape(-1)])
    return {"history_length": np.array([history.size]), "oov_rate": np.array([oov_rate(ids)])}
