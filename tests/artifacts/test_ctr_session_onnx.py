"""ctr_session's GPU graph (builders/onnx_export/ctr_session.py), proven with ONNX Runtime on CPU.

The TensorRT plan of ``ctr_session`` is built from this graph, with Triton keeping ``HISTORY_OUT``
and feeding it back as ``HISTORY_IN``. Here ONNX Runtime plays both parts: fed its own
``HISTORY_OUT`` event by event, the graph must rank every candidate exactly as ``ctr_ranking`` does
on the full history — scores within 1e-5 of the PyTorch network on rows built by
``tritonrepo.ctr.features`` (the reference of tests/server/test_ctr.py), and of ctr_model's ONNX
export, the model ``ctr_ranking`` serves.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from builders.gates.accuracy_gate import scores_by_candidate
from builders.onnx_export import ctr_network
from builders.onnx_export import ctr_session as ctr_session_onnx
from builders.onnx_export.ctr import WEIGHTS
from builders.tensorrt.plan_data import session_feed
from tritonrepo.ctr import features
from tritonrepo.ctr import spec as ctr_spec
from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo_format.config_sets import config_path
from tritonrepo_format.configs import load_config

TOLERANCE = 1e-5  # as tests/server/test_ctr.py: served CTR vs PyTorch
NETWORK = MODEL_REPOSITORY / ctr_spec.CORE_MODEL / "1" / "model.onnx"


@pytest.fixture(scope="module")
def graph_path(tmp_path_factory):
    """The session graph built from ctr_model/1 into a temporary folder (the builder itself is
    under test, not the file `make artifacts` left in the repository)."""
    if not NETWORK.is_file():
        pytest.fail(f"{NETWORK} is missing: run `make artifacts`")
    return ctr_session_onnx.build(NETWORK, tmp_path_factory.mktemp("session") / "model.onnx")


@pytest.fixture(scope="module")
def session(graph_path):
    return ort.InferenceSession(str(graph_path), providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def references():
    """rows INT64 [n, 64] -> (PyTorch CTR, ctr_model ONNX Runtime CTR), both FP32 [n]."""
    model = ctr_network.load(WEIGHTS)
    served = ort.InferenceSession(str(NETWORK), providers=["CPUExecutionProvider"])

    def score(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        onnx_scores = served.run([ctr_spec.CORE_OUTPUT], {ctr_spec.CORE_INPUT: rows})[0]
        return ctr_network.predict(model, rows), onnx_scores.reshape(-1)

    return score


def run(session, history, item, candidates, start=False, ready=True):
    feed = session_feed(history, item, np.asarray(candidates), start)
    feed["READY"] = np.array([int(ready)], np.int32)
    item_ids, scores, history_out = session.run(
        [ctr_session_onnx.ITEM_IDS, ctr_session_onnx.SCORES, ctr_session_onnx.HISTORY_OUT], feed
    )
    return item_ids, scores, history_out


def random_session(rng: np.random.Generator, length: int) -> list[tuple[int, np.ndarray]]:
    """Events as tests/server/test_ctr.py draws them: item ids in -3..10004 (some out of
    vocabulary), 1..40 candidates in 1..9999, plus out-of-vocabulary and duplicate candidates."""
    events = []
    for _ in range(length):
        candidates = rng.integers(1, 10_000, size=int(rng.integers(1, 40)))
        if rng.random() < 0.3:
            candidates = np.append(candidates, [0, 10_000, -7, candidates[0]])
        events.append((int(rng.integers(-3, 10_005)), candidates))
    return events


def test_streaming_state_equals_full_history_ranking(session, references):
    """Every event's scores against the references on its full-history rows; the references
    run once on all events' rows together (each row is scored on its own)."""
    rng = np.random.default_rng(11)
    all_rows, all_got = [], []
    for length in (1, 5, 70, 130):  # 70 and 130 roll the 63-item window over
        state = np.zeros(ctr_spec.HISTORY_LENGTH, np.int64)  # Triton's zero initial state
        history: list[int] = []
        for k, (item, candidates) in enumerate(random_session(rng, length)):
            item_ids, scores, state = run(session, state, item, candidates, start=k == 0)
            history.append(item)
            window = features.history_window(np.array(history))
            np.testing.assert_array_equal(state, window)
            got = scores_by_candidate(candidates, item_ids, scores)
            assert (np.diff(scores) <= 0).all(), "SCORES must be sorted descending"
            # Ranked as ctr_postprocess ranks (stable: ties keep the request's order).
            np.testing.assert_array_equal(item_ids, candidates[np.argsort(-got, kind="stable")])
            all_rows.append(features.model_rows(window, candidates))
            all_got.append(got)
    pytorch, served = references(np.concatenate(all_rows))
    got = np.concatenate(all_got)
    worst_pytorch = float(np.abs(got - pytorch).max())
    worst_onnx = float(np.abs(got - served).max())
    print(f"\n{len(all_got)} events: max |score - PyTorch| {worst_pytorch:.2e}, "
          f"max |score - ctr_model ONNX| {worst_onnx:.2e}")  # fmt: skip
    assert worst_pytorch <= TOLERANCE
    assert worst_onnx <= TOLERANCE


def test_start_resets_the_history_and_a_slot_that_is_not_ready_keeps_it(session):
    full = np.arange(1, ctr_spec.HISTORY_LENGTH + 1, dtype=np.int64)
    _, _, restarted = run(session, full, 42, [7], start=True)
    np.testing.assert_array_equal(restarted, features.history_window(np.array([42])))
    _, _, kept = run(session, full, 42, [7], ready=False)
    np.testing.assert_array_equal(kept, full)
    _, _, shifted = run(session, full, 10_000, [7])  # out of vocabulary: appended as 0
    np.testing.assert_array_equal(shifted, np.append(full[1:], 0))


def test_graph_has_the_gpu_configs_interface(graph_path):
    """Names, types and shapes of the graph's I/O are what config.pbtxt declares (the full
    check is tests/unit/test_plan_config.py); the network inside is ctr_model's, weights
    included."""
    model = onnx.load(str(graph_path))
    inputs = {i.name for i in model.graph.input}
    assert inputs == set(ctr_session_onnx.INPUTS)
    cfg = load_config(MODEL_REPOSITORY / ctr_spec.SESSION_MODEL / "config.pbtxt")
    controls = {c.name for c in cfg.sequence_batching.control_input}
    (state,) = cfg.sequence_batching.state
    assert inputs == {t.name for t in cfg.input} | controls | {state.input_name}
    outputs = {o.name for o in model.graph.output}
    assert outputs == {t.name for t in cfg.output} | {state.output_name}
    network = onnx.load(str(NETWORK))
    weights = {i.name: i.raw_data for i in model.graph.initializer}
    assert all(weights[i.name] == i.raw_data for i in network.graph.initializer)


def test_cpu_config_loads_model_py_not_the_onnx_file():
    """The CPU config (Python backend) and the GPU graph share version folder 1: the Python
    backend runs ``model.py`` and never opens ``model.onnx`` (tests/server/test_ctr.py serves the
    CPU
    config with the graph present after `make artifacts`)."""
    cpu = load_config(config_path(MODEL_REPOSITORY, ctr_spec.SESSION_MODEL, "cpu"))
    assert cpu.backend == "python"
    assert cpu.default_model_filename in ("", "model.py")
    assert (MODEL_REPOSITORY / ctr_spec.SESSION_MODEL / "1" / "model.py").is_file()


def test_the_builder_refuses_a_graph_that_is_not_ctr_model(tmp_path):
    network = onnx.load(str(NETWORK))
    network.graph.input[0].name = "ids"
    renamed = tmp_path / "renamed.onnx"
    onnx.save(network, str(renamed))
    with pytest.raises(ValueError, match="expected the ctr_model network"):
        ctr_session_onnx.build(renamed, tmp_path / "out" / "model.onnx")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["renamed.onnx"]
