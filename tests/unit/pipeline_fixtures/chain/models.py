"""The chain pipeline's three core models (``onnx.helper``, batch dim symbolic)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.unit.pipeline_fixtures.toy import model as toy


def _elementwise(name: str, x: str, y: str, scale: float, shift: float) -> onnx.ModelProto:
    """``y = x * scale + shift``, FP32 [batch, 2] -> FP32 [batch, 2]."""
    nodes = [helper.make_node("Mul", [x, "s"], ["m"]), helper.make_node("Add", ["m", "t"], [y])]
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", 2])],
        [helper.make_tensor_value_info(y, TensorProto.FLOAT, ["batch", 2])],
        initializer=[
            numpy_helper.from_array(np.float32([scale]), "s"),
            numpy_helper.from_array(np.float32([shift]), "t"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def first() -> onnx.ModelProto:
    """``features`` FP32 [batch, 4] -> ``scores`` FP32 [batch, 2] (the toy graph)."""
    return toy.build()


def second() -> onnx.ModelProto:
    """``x`` FP32 [batch, 2] -> ``scores`` FP32 [batch, 2] = 2 x (its output has the same name
    as ``first``'s: the description renames it)."""
    return _elementwise("second", "x", "scores", 2.0, 0.0)


def scale() -> onnx.ModelProto:
    """``v`` FP32 [batch, 2] -> ``w`` FP32 [batch, 2] = 3 v - 1."""
    return _elementwise("scale", "v", "w", 3.0, -1.0)


def first_versioned(version: int = 1) -> onnx.ModelProto:
    """As :func:`first`, retrained as ``version`` (the toy's weights times ``version``)."""
    return toy.build_versioned(version)


RETRAINED_STEP = 0.01  # each later version's weights are 1 % further from version 1's


def first_retrained(version: int = 1) -> onnx.ModelProto:
    """As :func:`first`, retrained as ``version``: the toy's weights times
    ``1 + RETRAINED_STEP * (version - 1)`` (a retrained model that agrees on nearly every
    decision, unlike :func:`first_versioned`)."""
    model = toy.build()
    weights = next(t for t in model.graph.initializer if t.name == "W")
    scale = np.float32(1 + RETRAINED_STEP * (version - 1))
    weights.CopyFrom(numpy_helper.from_array(toy.WEIGHTS * scale, "W"))
    return model
