"""The digit_stream core model: a logistic regression on partial 8x8 digit images, trained on
scikit-learn's bundled digits and converted with skl2onnx."""

from functools import cache

import numpy as np
import onnx
from skl2onnx import to_onnx
from skl2onnx.common.data_types import FloatTensorType
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler

from pipelines.digit_stream.steps import SIDE, partial_image


def split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The fixed split ``(x_train, x_test, y_train, y_test)``: x FP32 ``[n, 8, 8]`` (pixels 0 to
    16), y int ``[n]`` (0-9); 25 % held out, stratified, ``random_state=0``."""
    data = load_digits()
    x = data.images.astype(np.float32)
    return tuple(
        train_test_split(x, data.target, test_size=0.25, stratify=data.target, random_state=0)
    )


def prefixes(images: np.ndarray) -> np.ndarray:
    """FP32 ``[8n, 64]``: every image's top 1, 2, ... 8 rows as :func:`partial_image` shows
    them to the model (what a session has sent after each row)."""
    return np.concatenate(
        [partial_image(image[:k]) for image in images for k in range(1, SIDE + 1)]
    )


@cache
def fit(version: int = 1) -> Pipeline:
    """The classifier fitted (deterministically) on every prefix of the training images.

    Version 1 is served; a later version (``make version NAME=digit_stream VERSION=2``) is
    refitted with a stronger regularisation, ``C = 0.05 / version``: a retrained core to roll
    out while sessions are open.
    """
    x_train, _, y_train, _ = split()
    clf = make_pipeline(StandardScaler(), LogisticRegression(C=0.05 / version, max_iter=2000))
    return clf.fit(prefixes(x_train), np.repeat(y_train, SIDE))


def build(version: int = 1) -> onnx.ModelProto:
    """The core ONNX graph of ``version``: input ``pixels`` FP32 ``[N, 64]`` (0 to 16), outputs
    ``label`` INT64 ``[N]`` and ``probabilities`` FP32 ``[N, 10]`` (columns: digits 0-9)."""
    types = [("pixels", FloatTensorType([None, SIDE * SIDE]))]
    clf = fit(version)
    return to_onnx(clf, initial_types=types, options={LogisticRegression: {"zipmap": False}})
