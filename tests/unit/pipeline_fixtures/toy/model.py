"""The toy core model, built with ``onnx.helper``: ``scores = features @ W + b``.

``features`` FP32 [batch, 4] -> ``scores`` FP32 [batch, 2]; the batch dim is symbolic.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

WEIGHTS = np.array([[1.0, -1.0], [0.5, 0.5], [-2.0, 1.0], [0.0, 3.0]], dtype=np.float32)
BIAS = np.array([0.25, -0.25], dtype=np.float32)


def _graph(feature_dims: list[int | str]) -> onnx.ModelProto:
    features = helper.make_tensor_value_info(
        "features", TensorProto.FLOAT, ["batch", *feature_dims]
    )
    scores = helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", 2])
    nodes = [
        helper.make_node("MatMul", ["features", "W"], ["product"]),
        helper.make_node("Add", ["product", "b"], ["sum"]),
        helper.make_node("Identity", ["sum"], ["scores"]),
    ]
    graph = helper.make_graph(
        nodes,
        "toy",
        [features],
        [scores],
        initializer=[numpy_helper.from_array(WEIGHTS, "W"), numpy_helper.from_array(BIAS, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # what the installed onnxruntime reads
    onnx.checker.check_model(model)
    return model


def build() -> onnx.ModelProto:
    """``features`` FP32 [batch, 4] -> ``scores`` FP32 [batch, 2]."""
    return _graph([4])


def build_dynamic() -> onnx.ModelProto:
    """As :func:`build`, but the features dim is symbolic too: ``features`` FP32 [batch, n]."""
    return _graph(["n"])


def build_batch_mixing() -> onnx.ModelProto:
    """As :func:`build`, minus the batch's mean score: each row depends on the others (what the
    builder's batch-parity check must refuse)."""
    model = build()
    graph = model.graph
    graph.node[-1].output[0] = "row_scores"
    graph.node.extend(
        [
            helper.make_node("ReduceMean", ["row_scores"], ["mean"], axes=[0], keepdims=1),
            helper.make_node("Sub", ["row_scores", "mean"], ["scores"]),
        ]
    )
    onnx.checker.check_model(model)
    return model


def build_misdeclared() -> onnx.ModelProto:
    """As :func:`build`, but the graph declares ``scores`` [batch, 3] while it computes
    [batch, 2] (ONNX Runtime warns about it on stderr; the generator must name it)."""
    model = build()
    model.graph.output[0].type.tensor_type.shape.dim[1].dim_value = 3
    return model


def build_fixed_batch() -> onnx.ModelProto:
    """As :func:`build` plus ``label`` INT64 (the winning column), declared as onnxmltools'
    ``convert_lightgbm(..., zipmap=False)`` declares a LightGBM classifier's: ``label`` ``[1]``
    and ``scores`` ``[1, 2]`` whatever the batch (ONNX Runtime returns ``[batch]`` and
    ``[batch, 2]``); the input's batch dim is unnamed, as onnxmltools writes ``None``."""
    model = build()
    graph = model.graph
    graph.input[0].type.tensor_type.shape.dim[0].Clear()
    graph.output[0].type.tensor_type.shape.dim[0].dim_value = 1
    graph.node.append(helper.make_node("ArgMax", ["scores"], ["label"], axis=1, keepdims=0))
    graph.output.append(helper.make_tensor_value_info("label", TensorProto.INT64, [1]))
    onnx.checker.check_model(model)
    return model


def build_bytes() -> bytes:
    """:func:`build` serialized (a ``build`` may return ONNX bytes)."""
    return build().SerializeToString()


def build_versioned(version: int = 1) -> onnx.ModelProto:
    """As :func:`build`, with the weights scaled by ``version`` (a retrained model stands in:
    version 2 answers ``features @ (2 W) + b``)."""
    model = build()
    weights = next(t for t in model.graph.initializer if t.name == "W")
    weights.CopyFrom(numpy_helper.from_array(WEIGHTS * version, "W"))
    return model
