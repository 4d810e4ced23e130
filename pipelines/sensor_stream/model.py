"""The sensor_stream core model: a recurrent ONNX graph written with ``onnx.helper``, the way
streaming models are often exported: the session's state is an input and its next value an
output (``state`` -> ``stateN``, ``[3, batch, channels]``: the batch dim second, as an LSTM's
``(h, c)``), and a scalar input no request sends (``alpha``, bound by ``[model] constants``).

Per channel the state is ``(count, mean, var)``, an exponentially weighted mean and variance of
the readings so far; each reading is scored against the state before it::

    count' = count + 1
    a      = max(alpha, 1 / count')                 # a plain average while count' < 1 / alpha
    diff   = x - mean
    z      = diff / sqrt(var + VAR_FLOOR) * min(count, 1)   # 0 for a session's first reading
    mean'  = mean + a * diff
    var'   = (1 - a) * (var + a * diff^2)

:func:`pipelines.sensor_stream.reference.stream` is the same recurrence in numpy.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

CHANNELS = 4
VAR_FLOOR = 0.01  # squared units: the sensors' noise floor, so a flat stream does not divide by 0


def build() -> onnx.ModelProto:
    """The graph: inputs ``reading`` FP32 ``[batch, 4]``, ``state`` FP32 ``[3, batch, 4]``,
    ``alpha`` FP32 ``[]``; outputs ``z`` FP32 ``[batch, 4]``, ``stateN`` FP32 ``[3, batch, 4]``.
    Opset 17."""
    consts = {
        "idx0": np.array(0, np.int64),
        "idx1": np.array(1, np.int64),
        "idx2": np.array(2, np.int64),
        "one": np.array(1.0, np.float32),
        "floor": np.array(VAR_FLOOR, np.float32),
        "axis0": np.array([0], np.int64),
    }
    nodes = [
        helper.make_node("Gather", ["state", "idx0"], ["count"], axis=0),
        helper.make_node("Gather", ["state", "idx1"], ["mean"], axis=0),
        helper.make_node("Gather", ["state", "idx2"], ["var"], axis=0),
        helper.make_node("Add", ["count", "one"], ["count_next"]),
        helper.make_node("Div", ["one", "count_next"], ["inverse"]),
        helper.make_node("Max", ["alpha", "inverse"], ["a"]),
        helper.make_node("Sub", ["reading", "mean"], ["diff"]),
        helper.make_node("Add", ["var", "floor"], ["var_floored"]),
        helper.make_node("Sqrt", ["var_floored"], ["scale"]),
        helper.make_node("Div", ["diff", "scale"], ["z_raw"]),
        helper.make_node("Min", ["count", "one"], ["seen"]),
        helper.make_node("Mul", ["z_raw", "seen"], ["z"]),
        helper.make_node("Mul", ["a", "diff"], ["step"]),
        helper.make_node("Add", ["mean", "step"], ["mean_next"]),
        helper.make_node("Mul", ["step", "diff"], ["spread"]),
        helper.make_node("Add", ["var", "spread"], ["var_plus"]),
        helper.make_node("Sub", ["one", "a"], ["keep"]),
        helper.make_node("Mul", ["keep", "var_plus"], ["var_next"]),
        *(
            helper.make_node("Unsqueeze", [name, "axis0"], [f"{name}_1"])
            for name in ("count_next", "mean_next", "var_next")
        ),
        helper.make_node(
            "Concat", ["count_next_1", "mean_next_1", "var_next_1"], ["stateN"], axis=0
        ),
    ]
    graph = helper.make_graph(
        nodes,
        "sensor_stream",
        [
            helper.make_tensor_value_info("reading", TensorProto.FLOAT, ["batch", CHANNELS]),
            helper.make_tensor_value_info("state", TensorProto.FLOAT, [3, "batch", CHANNELS]),
            helper.make_tensor_value_info("alpha", TensorProto.FLOAT, []),
        ],
        [
            helper.make_tensor_value_info("z", TensorProto.FLOAT, ["batch", CHANNELS]),
            helper.make_tensor_value_info("stateN", TensorProto.FLOAT, [3, "batch", CHANNELS]),
        ],
        initializer=[numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model
