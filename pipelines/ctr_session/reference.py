"""The stateless answers of ctr_session: what ctr_ranking answers, event by event, for the
session's history so far.

The generator proves ctr_session's stateful graph (config.pbtxt) against it event by event
(builders.pipeline.kinds.core_state_proof): the history window and the rows are built by
:mod:`tritonrepo.ctr.features` (as ``ctr_preprocess`` builds them), scored by ctr_model's
ONNX export (``ctr_model/1/model.onnx``, the model ``ctr_ranking`` serves, run by ONNX Runtime)
and ranked as ``ctr_postprocess`` ranks (CTR descending, ties in the request's order).
"""

from __future__ import annotations

from functools import cache

import numpy as np

from tritonrepo.ctr import features, spec
from tritonrepo.paths import MODEL_REPOSITORY


@cache
def _ctr_model():
    import onnxruntime as ort

    path = MODEL_REPOSITORY / spec.CORE_MODEL / "1" / "model.onnx"
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def answer(events: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The answers to a whole session, one row per event (``ITEM_ID`` INT64 ``[events, 1]``,
    ``CANDIDATES`` INT64 ``[events, n]``, from START): row ``j`` of ``ITEM_IDS`` INT64
    ``[events, n]`` holds event ``j``'s candidates as sent by CTR descending, given the items
    of events 0..j, and row ``j`` of ``SCORES`` FP32 ``[events, n]`` their CTR in (0, 1).

    Raises:
        onnxruntime's errors when ``ctr_model/1/model.onnx`` is missing (``make artifacts``).
    """
    items = np.asarray(events["ITEM_ID"], np.int64).reshape(len(events["ITEM_ID"]), -1)
    ids, ctrs = [], []
    for j, candidates in enumerate(np.asarray(events["CANDIDATES"], np.int64)):
        history = items[: j + 1].reshape(-1)
        rows = features.model_rows(features.history_window(history), candidates.reshape(-1))
        scores = _ctr_model().run([spec.CORE_OUTPUT], {spec.CORE_INPUT: rows})[0].reshape(-1)
        order = np.argsort(-scores, kind="stable")
        ids.append(candidates.reshape(-1)[order])
        ctrs.append(scores[order].astype(np.float32))
    return {"ITEM_IDS": np.stack(ids), "SCORES": np.stack(ctrs)}
