"""A core graph made servable as its description says, before anything checks or builds it:
graph inputs bound to constants (``[model] constants``: :func:`bind_constants`) and the state
tensors a graph returns moved batch first (``[[sequence.state]] batch_axis``:
:func:`batch_first_states`), each state's I/O shape written from its declared ``dims``.

Streaming models are often exported with a scalar input no request sends (a sample rate) and a
recurrent state whose batch dim is not first (``[layers, batch, hidden]``); Triton's batching
and the session model join events along the first dim. The generator and the build obtain the
graph through :func:`builders.pipeline.graph.obtain_model`, which calls :func:`adapt_graph`,
so the checked, proven, built and served graph are one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from tritonrepo.description import Pipeline, StateTensor
from tritonrepo_format.dtypes import NAMES_BY_ONNX

BATCH_PARAM = "batch"  # the symbolic batch dim written into a state's I/O shape
GRAPH_SUFFIX = "__as_exported"  # the graph's own name for a state tensor moved batch first


class GraphAdaptError(ValueError):
    """The graph does not have what the description binds or declares; the message names the
    field and the fix."""


def adapt_graph(model: Any, pipeline: Pipeline) -> None:
    """Bind ``pipeline.core.constants`` and move the session's state tensors batch first in
    ``model`` (an ``onnx.ModelProto``, edited in place).

    Raises:
        GraphAdaptError: a constant or a state names a tensor the graph does not have, or one
            that does not fit.
    """
    bind_constants(model, pipeline.core.constants)
    if pipeline.session is not None and pipeline.session.states:
        batch_first_states(model, pipeline.session.states)


def bind_constants(model: Any, constants: Mapping[str, Any]) -> None:
    """Each graph input named in ``constants`` becomes an initializer of the input's dtype and
    the value's shape (its rank must be the input's).

    Raises:
        GraphAdaptError: no such input, a rank that differs, or a value of another kind.
    """
    from onnx import helper, numpy_helper

    inputs = {value.name: value for value in model.graph.input}
    for name, value in constants.items():
        where = f"model.constants.{name}"
        graph_input = inputs.get(name)
        if graph_input is None:
            raise GraphAdaptError(f"{where}: the graph has no input '{name}'; its inputs: "
                                  f"{sorted(inputs)}")  # fmt: skip
        tensor_type = graph_input.type.tensor_type
        dtype = helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)
        try:
            array = np.asarray(value, dtype=dtype)
        except (TypeError, ValueError) as exc:
            raise GraphAdaptError(f"{where}: {value!r} is not a {dtype} value: {exc}") from None
        if tensor_type.HasField("shape") and len(tensor_type.shape.dim) != array.ndim:
            raise GraphAdaptError(
                f"{where}: the input has rank {len(tensor_type.shape.dim)}, the value "
                f"{array.ndim}; give {'a number' if not tensor_type.shape.dim else 'a list'}"
            )
        model.graph.input.remove(graph_input)
        model.graph.initializer.append(numpy_helper.from_array(array, name))


def _to_front(rank: int, axis: int) -> list[int]:
    """The permutation that moves ``axis`` first (the others in order)."""
    return [axis, *(i for i in range(rank) if i != axis)]


def _inverse(perm: Sequence[int]) -> list[int]:
    out = [0] * len(perm)
    for i, p in enumerate(perm):
        out[p] = i
    return out


def _rename_uses(graph: Any, old: str, new: str) -> None:
    """Every use of ``old`` as a node input in ``graph`` and its subgraphs becomes ``new``."""
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name == old:
                node.input[i] = new
        for attribute in node.attribute:
            if attribute.HasField("g"):
                _rename_uses(attribute.g, old, new)
            for sub in attribute.graphs:
                _rename_uses(sub, old, new)


def _set_shape(value: Any, dims: Iterable[int]) -> None:
    """``value``'s shape: the batch dim first, then ``dims``."""
    shape = value.type.tensor_type.shape
    del shape.dim[:]
    shape.dim.add().dim_param = BATCH_PARAM
    for d in dims:
        shape.dim.add().dim_value = d


def _check_state_tensor(value: Any, state: StateTensor, key: str, where: str) -> None:
    """The graph's own declaration of a state tensor against the description: its dtype, and
    its rank and fixed dims where it declares them."""
    tensor_type = value.type.tensor_type
    dtype = NAMES_BY_ONNX.get(tensor_type.elem_type)
    if dtype != state.dtype:
        raise GraphAdaptError(f"{where}.dtype: the graph's {key} '{value.name}' is {dtype}, the "
                              f"description says {state.dtype}")  # fmt: skip
    if not tensor_type.HasField("shape"):
        return
    declared = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
                for d in tensor_type.shape.dim]  # fmt: skip
    want = state.graph_shape
    fits = len(declared) == len(want) and all(
        d is None or (w is not None and d == w) for d, w in zip(declared, want, strict=True)
    )  # the batch dim (w None) must be a dynamic one (d None) in the graph
    if not fits and any(d is not None for d in declared):
        shown = ["N" if d is None else d for d in declared]
        wanted = ["batch" if w is None else w for w in want]
        raise GraphAdaptError(
            f"{where}: the graph's {key} '{value.name}' is {shown} (N = any), the description "
            f"{wanted} (dims {list(state.dims)} with the batch dim at batch_axis "
            f"{state.batch_axis}); fix dims or batch_axis"
        )


def batch_first_states(model: Any, states: Sequence[StateTensor]) -> None:
    """Each state's input and output made ``[batch, *dims]``: a ``Transpose`` after the input
    and before the output where the graph has the batch dim at ``batch_axis`` > 0 (the graph
    keeps its own layout inside), and the I/O shapes written from ``dims``.

    Raises:
        GraphAdaptError: a state's input or output is not in the graph, or does not fit its
            declared dtype and shape.
    """
    from onnx import helper

    graph = model.graph
    for i, state in enumerate(states):
        where = f"sequence.state[{i}]"
        inputs = {v.name: v for v in graph.input}
        outputs = {v.name: v for v in graph.output}
        for key, name, found in (("input", state.input, inputs), ("output", state.output,
                                                                  outputs)):  # fmt: skip
            if name not in found:
                raise GraphAdaptError(
                    f"{where}.{key}: the graph has no {key} '{name}'; its {key}s: {sorted(found)}"
                )
            _check_state_tensor(found[name], state, key, where)
        if state.batch_axis:
            rank = len(state.dims) + 1
            front = _to_front(rank, state.batch_axis)
            inner_in, inner_out = state.input + GRAPH_SUFFIX, state.output + GRAPH_SUFFIX
            _rename_uses(graph, state.input, inner_in)
            for node in graph.node:
                for j, name in enumerate(node.output):
                    if name == state.output:
                        node.output[j] = inner_out
            _rename_uses(graph, state.output, inner_out)
            for info in [v for v in graph.value_info if v.name == state.output]:
                graph.value_info.remove(info)
            graph.node.insert(0, helper.make_node("Transpose", [state.input], [inner_in],
                                                  perm=_inverse(front)))  # fmt: skip
            graph.node.append(helper.make_node("Transpose", [inner_out], [state.output],
                                               perm=front))  # fmt: skip
        _set_shape(inputs[state.input], state.dims)
        _set_shape(outputs[state.output], state.dims)
