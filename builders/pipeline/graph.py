"""The core model of a description as an ONNX graph: obtained from its source, and its I/O.

A description's ``[model]`` names an ``onnx`` file (relative to the checkout), a ``build``
function returning the model, or a ``builder`` module of this repository that writes it (then
its I/O is declared in the description, ``[[model.input]]``/``[[model.output]]``, and read from
the built file when it exists).
"""

from __future__ import annotations

import inspect
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from builders.pipeline.graph_adapt import GraphAdaptError, adapt_graph
from tritonrepo.description import Pipeline, import_ref
from tritonrepo.paths import REPO_ROOT
from tritonrepo_format.dtypes import NAMES_BY_ONNX

# ONNX TensorProto element types -> Triton data types (onnx.TensorProto.DataType).
ONNX_TO_TRITON = NAMES_BY_ONNX
EXPORT_OPSET = 17  # torch.onnx.export opset for a PyTorch source (the shipped exports' opset)


@dataclass(frozen=True)
class GraphTensor:
    """One input or output of the graph: Triton dtype and the full shape, batch dim first;
    ``None`` for a symbolic (dynamic) dim."""

    name: str
    dtype: str
    shape: tuple[int | None, ...]


@dataclass(frozen=True)
class GraphIO:
    """The graph's inputs and outputs, in graph order."""

    inputs: tuple[GraphTensor, ...]
    outputs: tuple[GraphTensor, ...]


class ModelSourceError(ValueError):
    """The description's model source could not produce an ONNX model; the message says why."""


def graph_io(model: Any) -> GraphIO:
    """The I/O of an ``onnx.ModelProto`` (initializers listed as inputs are left out).

    Raises:
        ModelSourceError: a tensor's element type has no Triton data type.
    """
    initializers = {i.name for i in model.graph.initializer}

    def tensors(values: Any) -> tuple[GraphTensor, ...]:
        out = []
        for value in values:
            if value.name in initializers:
                continue
            kind = value.type.WhichOneof("value")
            if kind != "tensor_type":
                raise ModelSourceError(
                    f"graph tensor '{value.name}' is a {kind}, not a tensor; export plain "
                    "tensors (skl2onnx: options {'zipmap': False})"
                )
            elem = value.type.tensor_type.elem_type
            if elem not in ONNX_TO_TRITON:
                raise ModelSourceError(f"graph tensor '{value.name}': element type {elem}")
            dims = tuple(
                d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
                for d in value.type.tensor_type.shape.dim
            )
            out.append(GraphTensor(value.name, ONNX_TO_TRITON[elem], dims))
        return tuple(out)

    return GraphIO(tensors(model.graph.input), tensors(model.graph.output))


def obtain_model(
    pipeline: Pipeline, torch_source: dict[str, Any] | None = None, version: int | None = None
) -> Any:
    """The core model as an ``onnx.ModelProto``, from the description's ``onnx`` file or
    ``build`` function (a ``ModelProto``, ONNX bytes, a path, or ``(torch.nn.Module,
    {input: example tensor})`` exported here with a dynamic batch dim, opset
    :data:`EXPORT_OPSET`). When ``build`` returns a torch module and ``torch_source`` is a dict,
    it receives ``{"module": ..., "examples": ...}``. With ``version`` (a version built after the
    first: :mod:`builders.pipeline.build_version`), a ``build`` function that has a ``version``
    parameter is called with it.

    The graph is then adapted as the description says (``[model] constants``, the batch dim of
    ``[[sequence.state]]`` first: :func:`builders.pipeline.graph_adapt.adapt_graph`).

    Raises:
        ModelSourceError: the file is missing, the function fails, or returns something else;
            also for a ``builder`` core (built by its own module: read the built file instead),
            and for a graph that does not have what the description binds or declares.
    """
    model = _obtain(pipeline, torch_source, version)
    try:
        adapt_graph(model, pipeline)
    except GraphAdaptError as exc:
        raise ModelSourceError(str(exc)) from None
    return model


def _obtain(
    pipeline: Pipeline, torch_source: dict[str, Any] | None, version: int | None = None
) -> Any:
    """The model as the description's source gives it (:func:`obtain_model`)."""
    import onnx

    core = pipeline.core
    if core.onnx is not None:
        path = REPO_ROOT / core.onnx
        if not path.is_file():
            raise ModelSourceError(
                f"model.onnx: {path} does not exist; give a path in the checkout"
            )
        return onnx.load(str(path))
    if core.build is None:
        raise ModelSourceError(f"model.builder: {core.builder} builds it; run `make artifacts`")
    try:
        function = import_ref(core.build)
        asks = version is not None and takes_version(function)
        result = function(version=version) if asks else function()
    except Exception as exc:
        raise ModelSourceError(f"model.build: {core.build}() failed: {exc!r}") from exc
    if isinstance(result, onnx.ModelProto):
        return result
    if isinstance(result, bytes):
        return onnx.load_from_string(result)
    if isinstance(result, (str, Path)):
        return onnx.load(str(result))
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], dict):
        if torch_source is not None:
            torch_source.update(module=result[0], examples=result[1])
        return _export_torch(*result)
    raise ModelSourceError(
        f"model.build: {core.build}() returned {type(result).__name__}; return an "
        "onnx.ModelProto, ONNX bytes, a path, or (torch.nn.Module, {input: example})"
    )


def takes_version(function: Any) -> bool:
    """Whether a ``build`` function has a ``version`` parameter (it builds per version)."""
    try:
        return "version" in inspect.signature(function).parameters
    except (TypeError, ValueError):  # a builtin or a callable without a signature
        return False


def _export_torch(module: Any, examples: dict[str, Any]) -> Any:
    """Export ``module`` called with the ``examples`` (in order) to ONNX, batch dim dynamic."""
    import onnx
    import torch

    names = list(examples)
    module.eval()
    with torch.inference_mode():
        outputs = module(*examples.values())
    count = len(outputs) if isinstance(outputs, (tuple, list)) else 1
    output_names = [f"output_{i}" for i in range(count)] if count > 1 else ["output"]
    buffer = io.BytesIO()
    torch.onnx.export(
        module,
        tuple(examples.values()),
        buffer,
        input_names=names,
        output_names=output_names,
        dynamic_axes={n: {0: "batch"} for n in [*names, *output_names]},
        opset_version=EXPORT_OPSET,
        dynamo=False,
    )
    return onnx.load_from_string(buffer.getvalue())
