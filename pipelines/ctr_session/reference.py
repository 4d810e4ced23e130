"""The stateless answer of ctr_session: what ctr_ranking answers for the session's whole history.

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


def answer(events: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The answer to the last of ``events`` (one session from START, each ``ITEM_ID`` INT64
    [1], ``CANDIDATES`` INT64 [n]): ``ITEM_IDS`` INT64 [n], the candidates as sent by CTR
    descending, and ``SCORES`` FP32 [n], their CTR in (0, 1).

    Raises:
        onnxruntime's errors when ``ctr_model/1/model.onnx`` is missing (``make artifacts``).
    """
    history = np.concatenate([np.asarray(e["ITEM_ID"], np.int64).reshape(-1) for e in events])
    candidates = np.asarray(events[-1]["CANDIDATES"], np.int64).reshape(-1)
    rows = features.model_rows(features.history_window(history), candidates)
    scores = _ctr_model().run([spec.CORE_OUTPUT], {spec.CORE_INPUT: rows})[0].reshape(-1)
    order = np.argsort(-scores, kind="stable")
    return {"ITEM_IDS": candidates[order], "SCORES": scores[order].astype(np.float32)}
