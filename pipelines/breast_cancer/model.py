"""The breast_cancer core model: StandardScaler + LogisticRegression, converted with skl2onnx."""

from functools import cache

import numpy as np
import onnx
from skl2onnx import to_onnx
from skl2onnx.common.data_types import FloatTensorType
from sklearn.datasets import load_breast_cancer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler

from pipelines.breast_cancer.steps import preprocess


def split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The fixed split ``(x_train, x_test, y_train, y_test)``: x FP32 ``[n, 30]``, y int ``[n]``.

    25 % held out, stratified, ``random_state=0``; y is 0 = malignant, 1 = benign.
    """
    data = load_breast_cancer()
    x = data.data.astype(np.float32)
    return tuple(
        train_test_split(x, data.target, test_size=0.25, stratify=data.target, random_state=0)
    )


@cache
def fit(version: int = 1) -> Pipeline:
    """The estimator fitted (deterministically) on ``preprocess`` of the training split.

    Version 1 is served; a later version (``make version NAME=breast_cancer VERSION=2``) is
    refitted with a stronger regularisation, ``C = 1 / version``: a retrained model to roll out.
    """
    x_train, _, y_train, _ = split()
    clf = make_pipeline(StandardScaler(), LogisticRegression(C=1.0 / version, max_iter=5000))
    return clf.fit(preprocess({"MEASUREMENTS": x_train})["features"], y_train)


def build(version: int = 1) -> onnx.ModelProto:
    """The core ONNX graph of ``version`` (opset from skl2onnx), batch dim ``N`` dynamic.

    Input ``features`` FP32 ``[N, 33]`` (from ``preprocess``); outputs ``label`` INT64 ``[N]``
    and ``probabilities`` FP32 ``[N, 2]`` (columns: malignant, benign).
    """
    clf = fit(version)
    n_features = clf[0].n_features_in_
    types = [("features", FloatTensorType([None, n_features]))]
    return to_onnx(clf, initial_types=types, options={LogisticRegression: {"zipmap": False}})


def training_requests() -> list[dict[str, np.ndarray]]:
    """The drift reference: the training split as one request, ``MEASUREMENTS`` FP32
    ``[426, 30]``."""
    return [{"MEASUREMENTS": split()[0]}]
