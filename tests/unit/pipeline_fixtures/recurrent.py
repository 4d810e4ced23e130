"""The functions of the recurrent descriptions the unit tests generate: sensor_stream's graph
as a user who moved its state batch first by hand would build it (:func:`build_batch_first`),
the documented wrong form of its step (:func:`step_keeping_the_state`: the state computed
before the core runs), and a graph that forgets its state (:func:`build_forgetful`: its state
output is its state input) with samples and a running-sum reference."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from builders.pipeline.graph_adapt import batch_first_states, bind_constants
from pipelines.sensor_stream import model as sensor_model
from tritonrepo.description import StateTensor

STATE = StateTensor("state", "stateN", "FP32", (3, sensor_model.CHANNELS), batch_axis=1)
CALLS: list[str] = []  # the order of step and postprocess calls (test_replay_order)


def build_batch_first() -> onnx.ModelProto:
    """sensor_stream's graph with ``alpha`` bound to 0.1 and its state ``[batch, 3, 4]``."""
    model = sensor_model.build()
    bind_constants(model, {"alpha": 0.1})
    batch_first_states(model, [STATE])
    return model


def step_keeping_the_state(state, inputs):
    """The wrong form: the step keeps the state and sends it to the core, but the model's next
    state is a core output the step never sees, so it stays at zeros."""
    reading = np.asarray(inputs["READING"], np.float32)
    if not np.all(np.isfinite(reading)):
        raise ValueError("READING must be finite")
    if state is None:
        state = np.zeros((1, *STATE.dims), np.float32)
    return state, {"reading": reading, "state": state}


def build_forgetful() -> onnx.ModelProto:
    """``y = x + state``, ``stateN = state``: a state output that is not the next state."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2])
    s = helper.make_tensor_value_info("s", TensorProto.FLOAT, ["batch", 2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2])
    s_next = helper.make_tensor_value_info("s_next", TensorProto.FLOAT, ["batch", 2])
    nodes = [helper.make_node("Add", ["x", "s"], ["y"]),
             helper.make_node("Identity", ["s"], ["s_next"])]  # fmt: skip
    graph = helper.make_graph(nodes, "forgetful", [x, s], [y, s_next])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def sum_samples() -> list[dict[str, np.ndarray]]:
    """Three sessions of 3, 4 and 5 events: ``X`` FP32 ``[events, 2]``, all > 0."""
    rng = np.random.default_rng(3)
    return [{"X": rng.uniform(1, 2, size=(n, 2)).astype(np.float32)} for n in (3, 4, 5)]


def running_sum(events: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``Y`` after each event: the sum of every X so far."""
    return {"Y": np.cumsum(np.asarray(events["X"], np.float32), axis=0)}


def as_y(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Postprocess: the core's ``y`` as ``Y``."""
    CALLS.append("post")
    return {"Y": np.asarray(inputs["y"], np.float32)}


def to_x(state, inputs):
    """A step that only renames (records its calls)."""
    CALLS.append("step")
    return state, {"x": np.asarray(inputs["X"], np.float32)}


def build_running_sum() -> onnx.ModelProto:
    """``y = s_next = x + s``: a recurrent running sum whose input is the request's ``x``."""
    model = build_forgetful()
    for node in model.graph.node:
        if node.op_type == "Identity":
            node.input[0] = "y"
    return model


def x_samples() -> list[dict[str, np.ndarray]]:
    """:func:`sum_samples` with the request tensor named as the core's input, ``x``."""
    return [{"x": s["X"]} for s in sum_samples()]


def running_sum_x(events: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """:func:`running_sum` of the request tensor ``x``."""
    return running_sum({"X": events["x"]})
