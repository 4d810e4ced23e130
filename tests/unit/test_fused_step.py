"""The one-step CPU model's logic (:func:`tritonrepo.pipelines.fused_step.fused_run`) on a real
ONNX Runtime session of a two-node graph, without a server: each request gets its own answer or
its own error, labelled with the stage that failed, and the others of the batch are served."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tritonrepo.pipelines.function_calls import OutputSpec
from tritonrepo.pipelines.fused_step import fused_run
from tritonrepo.runners.onnx_runner import OnnxRunner
from tritonrepo.step.errors import InvalidRequest


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> OnnxRunner:
    """``y = 2 * x + 1``, ``x`` FP32 ``[b, 3]`` → ``y`` FP32 ``[b, 3]`` and ``n``, the sum of
    ``x`` per row, FP32 ``[b]`` (a tensor with the batch dim only)."""
    graph = helper.make_graph(
        [
            helper.make_node("Mul", ["x", "two"], ["doubled"]),
            helper.make_node("Add", ["doubled", "one"], ["y"]),
            helper.make_node("ReduceSum", ["x", "axes"], ["n"], keepdims=0),
        ],
        "affine",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 3])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 3]),
            helper.make_tensor_value_info("n", TensorProto.FLOAT, ["b"]),
        ],
        [
            helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]),
            helper.make_tensor("one", TensorProto.FLOAT, [], [1.0]),
            helper.make_tensor("axes", TensorProto.INT64, [1], [1]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = Path(tmp_path_factory.mktemp("fused")) / "model.onnx"
    onnx.save(model, str(path))
    return OnnxRunner(path)


def preprocess(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    values = inputs["VALUES"]
    if (values < 0).any():
        raise ValueError("VALUES must be >= 0")
    return {"x": values.astype(np.float32), "ROWS": np.full((len(values), 1), len(values))}


def postprocess(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    if (inputs["y"] > 1000).any():
        raise RuntimeError("too large")
    # As in the ensemble, a batch-only graph output arrives as [n, 1]: SUM keeps that shape.
    return {"TOTAL": inputs["y"].sum(axis=1, keepdims=True), "ROWS": inputs["ROWS"],
            "SUM": inputs["n"]}  # fmt: skip


PRE = (preprocess, "t:preprocess", {
    "x": OutputSpec(np.dtype(np.float32), (3,)),
    "ROWS": OutputSpec(np.dtype(np.int64), (1,)),
})  # fmt: skip
POST = (postprocess, "t:postprocess", {
    "TOTAL": OutputSpec(np.dtype(np.float32), (1,)),
    "ROWS": OutputSpec(np.dtype(np.int64), (1,)),
    "SUM": OutputSpec(np.dtype(np.float32), (1,)),
})  # fmt: skip


def test_each_request_gets_the_three_stages_of_its_own_rows(runner: OnnxRunner):
    items = [{"VALUES": np.array([[1, 2, 3]], np.float32)},
             {"VALUES": np.array([[0, 0, 0], [1, 1, 1]], np.float32)}]  # fmt: skip
    first, second = fused_run(items, PRE, runner, POST)
    # The reference: 2x + 1 summed over the row, computed here, not by the code under test.
    np.testing.assert_allclose(first["TOTAL"], [[2 * 6 + 3]])
    np.testing.assert_allclose(second["TOTAL"], [[3], [2 * 3 + 3]])
    np.testing.assert_allclose(second["SUM"], [[0], [3]])  # [n] from the graph, [n, 1] here
    # Preprocess ran on the joined batch (3 rows), and its extra tensor reached postprocess.
    assert first["ROWS"].tolist() == [[3]] and second["ROWS"].tolist() == [[3], [3]]


def test_a_bad_request_gets_its_own_error_named_by_its_stage(runner: OnnxRunner):
    items = [
        {"VALUES": np.array([[1, 1, 1]], np.float32)},
        {"VALUES": np.array([[-1, 0, 0]], np.float32)},  # refused by preprocess
        {"VALUES": np.array([[900, 0, 0]], np.float32)},  # 1801 > 1000: postprocess fails
        {"VALUES": np.array([[2, 2, 2]], np.float32)},
    ]
    results = fused_run(items, PRE, runner, POST)
    assert isinstance(results[1], InvalidRequest)
    assert str(results[1]) == "preprocess: VALUES must be >= 0"
    assert isinstance(results[2], RuntimeError) and not isinstance(results[2], InvalidRequest)
    assert str(results[2]).startswith("postprocess: ") and "too large" in str(results[2])
    np.testing.assert_allclose(results[0]["TOTAL"], [[9]])
    np.testing.assert_allclose(results[3]["TOTAL"], [[15]])


def test_a_core_failure_fails_only_the_requests_it_ran(runner: OnnxRunner):
    """Preprocess declares any width here, so 4 columns pass its check and the graph (3
    columns) refuses them: the request gets the core's error, named as such."""
    wide = (lambda inputs: {"x": np.ones((1, 4), np.float32), "ROWS": np.ones((1, 1), np.int64)},
            "t:wide", {"x": OutputSpec(np.dtype(np.float32), (-1,)),
                       "ROWS": OutputSpec(np.dtype(np.int64), (1,))})  # fmt: skip
    (result,) = fused_run([{"VALUES": np.zeros((1, 3), np.float32)}], wide, runner, POST)
    assert isinstance(result, RuntimeError) and str(result).startswith("core model: ")


def test_instances_follow_the_inputs_unless_the_cpu_deployment_asks():
    """Numeric inputs: one instance (larger batches); a BYTES input: two (decoding in Python
    holds the GIL); an explicit ``instances`` above one in the core's cpu deployment wins."""
    from dataclasses import replace

    from builders.pipeline.serving_forms.fused_cpu import (
        BYTES_INSTANCES,
        FUSED_SET,
        NUMERIC_INSTANCES,
        fused_instances,
    )
    from tritonrepo.description import load
    from tritonrepo.paths import PIPELINES

    tabular = load(PIPELINES / "click_lightgbm" / "pipeline.toml")
    images = load(PIPELINES / "nudenet_detector" / "pipeline.toml")
    assert {t.dtype for t in tabular.inputs} == {"FP32"}
    assert "BYTES" in {t.dtype for t in images.inputs}
    assert (NUMERIC_INSTANCES, BYTES_INSTANCES) == (1, 2)
    assert fused_instances(tabular) == NUMERIC_INSTANCES
    assert fused_instances(images) == BYTES_INSTANCES
    cpu = replace(tabular.core.deployments[FUSED_SET], instances=3)
    core = replace(tabular.core, deployments={**tabular.core.deployments, FUSED_SET: cpu})
    assert fused_instances(replace(tabular, core=core)) == 3
