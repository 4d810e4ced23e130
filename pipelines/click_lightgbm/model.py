"""The click_lightgbm core model: a LightGBM classifier trained on a synthetic click log,
converted to ONNX with onnxmltools (``ai.onnx.ml`` TreeEnsembleClassifier)."""

from functools import cache

import lightgbm
import numpy as np
import onnx
from onnxmltools import convert_lightgbm
from onnxmltools.convert.common.data_types import FloatTensorType

from pipelines.click_lightgbm.steps import N_FEATURES

SEED = 20261202
TRAIN_ROWS, TEST_ROWS = 20_000, 4_000


def click_log(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` synthetic impressions: x FP32 ``[n, 10]`` (columns as ``steps.COLUMNS``) and
    clicks y INT64 ``[n]`` (0/1), fully determined by ``seed`` (numpy only).

    The click's log-odds is a made-up but plausible story: lower slots, a good query match, a
    high past ad CTR and an active returning user raise it; phones click a little more, evenings
    more than nights, and expensive items and stale ads less (coefficients chosen by hand).
    """
    rng = np.random.default_rng(seed)
    position = rng.integers(1, 11, n)
    hour = rng.integers(0, 24, n)
    device = rng.choice(3, n, p=[0.45, 0.45, 0.1])
    views = np.round(rng.gamma(2.0, 40.0, n))
    clicks = rng.binomial(views.astype(np.int64), rng.beta(1.0, 30.0, n))
    ad_ctr = rng.beta(2.0, 60.0, n)
    price = np.round(rng.lognormal(3.5, 1.2, n), 2)
    match = rng.beta(2.0, 2.0, n)
    age = rng.integers(0, 730, n)
    returning = rng.random(n) < 0.6
    logit = (
        -2.5
        - 0.25 * (position - 1)
        + 1.8 * (match - 0.5)
        + 25.0 * (ad_ctr - 0.03)
        + 3.0 * (clicks + 1) / (views + 30)
        + 0.3 * (device == 1)
        + 0.4 * np.cos((hour - 20) / 24 * 2 * np.pi)
        - 0.25 * np.log1p(price / 100)
        - 0.001 * age
        + 0.3 * returning
        + 1.0 * (match > 0.8) * (position <= 3)  # an interaction a linear model would miss
    )
    y = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(np.int64)
    x = np.column_stack(
        [position, hour, device, clicks, views, ad_ctr, price, match, age, returning]
    ).astype(np.float32)
    assert x.shape[1] == N_FEATURES
    return x, y


def split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(x_train, x_test, y_train, y_test)``: two disjoint draws of :func:`click_log`."""
    x_train, y_train = click_log(TRAIN_ROWS, SEED)
    x_test, y_test = click_log(TEST_ROWS, SEED + 1)
    return x_train, x_test, y_train, y_test


@cache
def fit() -> lightgbm.LGBMClassifier:
    """The classifier fitted deterministically (one thread, fixed seed) on the training draw."""
    x_train, _, y_train, _ = split()
    clf = lightgbm.LGBMClassifier(
        n_estimators=100,
        num_leaves=31,
        learning_rate=0.05,
        random_state=0,
        n_jobs=1,
        deterministic=True,
        verbose=-1,
    )
    return clf.fit(x_train, y_train)


def build() -> onnx.ModelProto:
    """The core ONNX graph (opsets chosen by onnxmltools), batch dim ``N`` dynamic (unnamed).

    Input ``features`` FP32 ``[N, 10]``; outputs ``label`` INT64 ``[N]`` and ``probabilities``
    FP32 ``[N, 2]`` (columns: no click, click), ``zipmap`` off. onnxmltools declares ``label``
    as ``[1]`` whatever the batch; the generator and the build see on the samples that it is the
    batch and make that dim dynamic (``builders.pipeline.batch_dims``), as ONNX Runtime returns it.
    """
    types = [("features", FloatTensorType([None, N_FEATURES]))]
    return convert_lightgbm(fit(), initial_types=types, zipmap=False)
