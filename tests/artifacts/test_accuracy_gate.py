"""The plans' accuracy gate (builders/gates/accuracy_gate.py) on CPU, with ONNX Runtime on both
sides.

The plan builder runs the gate with a TensorRT engine as the candidate; here the candidate is
the CPU INT8 artifact of the same model (text encoder version 4, ctr_model version 2, and a
ctr_session graph around ctr_model version 2), so the gate's code is tested on real, non-zero
differences: the measured figures pass the INT8 tolerance, and a too-strict tolerance fails.
Also the real-sample feeds (builders/tensorrt/plan_data.py): calibration at the profile's OPT shape
from the calibration splits.
"""

from __future__ import annotations

import numpy as np
import pytest

from builders.gates import accuracy_gate
from builders.gates.accuracy_gate import (
    TOLERANCES,
    GateFailed,
    Tolerance,
    judge,
    onnxrt_runner,
    run_gate,
)
from builders.onnx_export import ctr_session as ctr_session_onnx
from builders.tensorrt import plan_data
from builders.tensorrt.plan_config import model_profile
from reference_data import text_corpus as corpus
from reference_data.click_log import calibration_batches
from tritonrepo.ctr import features
from tritonrepo.ctr import spec as ctr_spec
from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.text import spec as text_spec
from tritonrepo_format.configs import load_config

ENCODER = MODEL_REPOSITORY / text_spec.ENCODER_MODEL
CTR = MODEL_REPOSITORY / ctr_spec.CORE_MODEL
GATE_BATCHES = 3  # of the text gate's batches of GATE_TEXT_BATCH texts


def artifact(path):
    if not path.is_file():
        pytest.fail(f"{path} is missing: run `make artifacts`")
    return path


@pytest.fixture(scope="module")
def text_figures():
    return run_gate(
        text_spec.ENCODER_MODEL,
        onnxrt_runner(artifact(ENCODER / "1" / "model.onnx"), "fp32"),
        onnxrt_runner(artifact(ENCODER / "4" / "model.onnx"), "int8"),
        TOLERANCES["int8"],
        data=plan_data.text_gate_feeds()[:GATE_BATCHES],  # the builder's first batches, for time
    )


@pytest.fixture(scope="module")
def ctr_figures():
    return run_gate(
        ctr_spec.CORE_MODEL,
        onnxrt_runner(artifact(CTR / "1" / "model.onnx"), "fp32"),
        onnxrt_runner(artifact(CTR / "2" / "model.onnx"), "int8"),
        TOLERANCES["int8"],
    )


@pytest.fixture(scope="module")
def session_figures(tmp_path_factory):
    folder = tmp_path_factory.mktemp("session")
    fp32 = ctr_session_onnx.build(artifact(CTR / "1" / "model.onnx"), folder / "fp32.onnx")
    int8 = ctr_session_onnx.build(artifact(CTR / "2" / "model.onnx"), folder / "int8.onnx")
    return run_gate(
        ctr_spec.SESSION_MODEL,
        onnxrt_runner(fp32, "fp32"),
        onnxrt_runner(int8, "int8"),
        TOLERANCES["int8"],
        data=plan_data.session_gate_feeds(runs=128),  # a quarter of the builder's, for time
    )


def test_text_encoder_int8_passes_its_gate(text_figures):
    print(f"\ntext encoder v4 vs v1: {text_figures}")
    texts = GATE_BATCHES * plan_data.GATE_TEXT_BATCH
    assert text_figures["passed"] and text_figures["texts"] == texts
    assert TOLERANCES["int8"].min_cosine <= text_figures["min_cosine"] < 1.0
    assert text_figures["min_cosine"] <= text_figures["mean_cosine"]


def test_ctr_model_int8_passes_its_gate(ctr_figures):
    print(f"\nctr_model v2 vs v1: {ctr_figures}")
    assert ctr_figures["passed"] and ctr_figures["rows"] == plan_data.GATE_ROWS
    assert 0 < ctr_figures["max_abs_ctr_diff"] <= TOLERANCES["int8"].max_ctr_diff
    assert abs(ctr_figures["auc_change"]) <= TOLERANCES["int8"].max_auc_change
    assert ctr_figures["auc_fp32"] > 0.75  # builders/onnx_export/ctr.py MIN_AUC: real held-out rows


def test_ctr_session_int8_passes_its_gate(session_figures):
    print(f"\nctr_session (ctr_model v2 inside) vs v1: {session_figures}")
    assert session_figures["passed"] and session_figures["rows"] == 128 * 8
    assert session_figures["history_out_equal"] and session_figures["scores_sorted"]
    assert 0 < session_figures["max_abs_ctr_diff"] <= TOLERANCES["int8"].max_ctr_diff


@pytest.mark.parametrize(
    ("model", "fixture", "strict", "message"),
    [
        (text_spec.ENCODER_MODEL, "text_figures", Tolerance(0.99999, 0, 0), "min cosine 0.99"),
        (ctr_spec.CORE_MODEL, "ctr_figures", Tolerance(0, 1e-3, 0.005), "max abs CTR diff"),
        (ctr_spec.CORE_MODEL, "ctr_figures", Tolerance(0, 0.05, 1e-6), "AUC change"),
        (ctr_spec.SESSION_MODEL, "session_figures", Tolerance(0, 1e-3, 1), "max abs CTR diff"),
    ],
    ids=["text-cosine", "ctr-diff", "ctr-auc", "session-diff"],
)
def test_a_too_strict_tolerance_fails(request, model, fixture, strict, message):
    figures = request.getfixturevalue(fixture)
    with pytest.raises(GateFailed, match=message):
        judge(model, figures, strict)


def test_session_gate_fails_on_a_wrong_state_or_unsorted_scores(session_figures):
    with pytest.raises(GateFailed, match="HISTORY_OUT differs"):
        judge(
            ctr_spec.SESSION_MODEL,
            session_figures | {"history_out_equal": False},
            TOLERANCES["int8"],
        )
    with pytest.raises(GateFailed, match="not sorted"):
        judge(
            ctr_spec.SESSION_MODEL, session_figures | {"scores_sorted": False}, TOLERANCES["int8"]
        )


def test_tolerances_tighten_with_precision():
    fp32, fp16, int8 = (TOLERANCES[p] for p in ("fp32", "fp16", "int8"))
    assert fp32.min_cosine > fp16.min_cosine > int8.min_cosine
    assert fp32.max_ctr_diff < fp16.max_ctr_diff < int8.max_ctr_diff
    assert fp32.max_auc_change < fp16.max_auc_change < int8.max_auc_change


def test_auc_equals_scikit_learn():
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(0)
    clicks = rng.integers(0, 2, 3000)
    scores = np.round(rng.random(3000), 2)  # many ties
    assert accuracy_gate.auc(clicks, scores) == pytest.approx(
        roc_auc_score(clicks, scores), abs=1e-12
    )
    with pytest.raises(ValueError, match="clicked and unclicked"):
        accuracy_gate.auc(np.ones(4), scores[:4])


def test_scores_by_candidate_restores_request_order():
    scores = accuracy_gate.scores_by_candidate(
        np.array([5, 9, 5, 7]), np.array([9, 5, 5, 7]), np.array([0.9, 0.5, 0.5, 0.1], np.float32)
    )
    np.testing.assert_array_equal(scores, np.array([0.5, 0.9, 0.5, 0.1], np.float32))
    with pytest.raises(ValueError, match="not a permutation"):
        accuracy_gate.scores_by_candidate(np.array([1, 2]), np.array([1, 3]), np.zeros(2))


# --- real-sample feeds --------------------------------------------------------------------


def gpu_profile(model: str):
    return model_profile(model, load_config(MODEL_REPOSITORY / model / "config.pbtxt"))


def test_text_calibration_is_real_calibration_text_at_the_opt_shape():
    profile = gpu_profile(text_spec.ENCODER_MODEL)
    feeds = plan_data.calibration_feeds(text_spec.ENCODER_MODEL, profile)
    opt = profile["input_ids"][1]
    assert len(feeds) == plan_data.CALIBRATION_TEXTS // opt[0]
    for feed in feeds:
        assert {k: (v.shape, v.dtype) for k, v in feed.items()} == {
            name: (opt, np.int64) for name in text_spec.ENCODER_INPUTS
        }
    texts = plan_data.real_texts("calibration", plan_data.CALIBRATION_TEXTS, 0)
    assert texts == corpus.real_texts(plan_data.CALIBRATION_TEXTS, split="calibration", seed=0)
    assert {corpus.split_of(t) for t in texts} == {"calibration"}
    # Real tokens: every row starts with [CLS] (101) and some rows fill all 128 positions.
    ids = np.concatenate([f["input_ids"] for f in feeds])
    assert (ids[:, 0] == 101).all() and (ids[:, -1] != 0).any()


def test_ctr_calibration_is_the_click_log_loader_at_the_opt_shape():
    profile = gpu_profile(ctr_spec.CORE_MODEL)
    feeds = plan_data.calibration_feeds(ctr_spec.CORE_MODEL, profile)
    opt = profile[ctr_spec.CORE_INPUT][1]
    assert all(f[ctr_spec.CORE_INPUT].shape == opt for f in feeds)
    expected = list(calibration_batches(plan_data.CALIBRATION_ROWS, batch_size=opt[0]))
    np.testing.assert_array_equal(
        np.concatenate([f[ctr_spec.CORE_INPUT] for f in feeds]), np.concatenate(expected)
    )


def test_session_calibration_replays_click_log_rows_at_the_opt_shape():
    profile = gpu_profile(ctr_spec.SESSION_MODEL)
    feeds = plan_data.calibration_feeds(ctr_spec.SESSION_MODEL, profile)
    opt = profile["CANDIDATES"][1]
    rows = np.concatenate(list(calibration_batches(plan_data.CALIBRATION_ROWS)))
    assert len(feeds) == len(rows) // opt[0]
    for k, feed in enumerate(feeds):
        assert feed["CANDIDATES"].shape == opt
        group = rows[k * opt[0] : (k + 1) * opt[0]]
        np.testing.assert_array_equal(feed["CANDIDATES"], group[:, -1])
        # After the graph appends ITEM_ID, the state is the first row's history window.
        window = np.append(feed["HISTORY_IN"][1:], features.to_vocabulary(feed["ITEM_ID"]))
        np.testing.assert_array_equal(window, group[0, : ctr_spec.HISTORY_LENGTH])


def test_texts_file_serves_the_same_draws(tmp_path):
    path = plan_data.write_texts(tmp_path / "texts.json")
    for split, n, seed in plan_data.TEXT_DRAWS:
        assert plan_data.real_texts(split, n, seed, path) == corpus.real_texts(n, split, seed)
    assert [p.name for p in tmp_path.iterdir()] == ["texts.json"]
