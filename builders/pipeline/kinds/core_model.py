"""A core model as the kinds check it and write it: its ONNX graph obtained from the description
(:func:`core_graph`), its tensors as the configs declare them (:func:`core_tensors`: from the
graph with ``fixed_dims`` applied, or the declared ``[[model.input]]``/``[[model.output]]`` of a
``builder`` core) and its files (:func:`core_files`). The single-core and session kinds check
their one core with these; the graph kind each of its cores."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from builders.pipeline.config_writer import SequenceBatching
from builders.pipeline.graph import GraphIO, GraphTensor, ModelSourceError, graph_io, obtain_model
from builders.pipeline.kinds.base import Checked, import_function
from builders.pipeline.model_configs import CoreTensor, core_config, core_sets, version_folders
from tritonrepo.description import Core, Pipeline
from tritonrepo_format.config_sets import DEFAULT_SET, set_file

CoreTensors = tuple[tuple[CoreTensor, ...], tuple[CoreTensor, ...]]  # inputs, outputs


def core_graph(pipeline: Pipeline, problems: list[str]) -> tuple[Any, GraphIO | None]:
    """The core's ONNX model (an ``onnx.ModelProto``) and its inputs and outputs, when the
    description gives the graph (``onnx`` or ``build``; None for a ``builder`` core or after
    earlier problems); an import or model-source problem is appended to ``problems``."""
    import_function(pipeline.core.build, "model.build", problems)
    if pipeline.core.builder is not None or problems:
        return None, None
    try:
        model = obtain_model(pipeline)
    except ModelSourceError as exc:
        problems.append(str(exc))
        return None, None
    return model, graph_io(model)


def core_tensors(core: Core, io: GraphIO | None, problems: list[str]) -> CoreTensors:
    """The core's tensors from the graph ``io`` (fixed dims applied; a batch-only tensor
    declared ``[1]`` and reshaped), or the declared ones when there is no graph. Problems
    (appended, fields ``model...``): a ``fixed_dims`` key the graph does not take or sizes
    that do not fit, a dynamic non-batch input dim without ``same_shape_batches``."""
    if io is None:
        return (
            tuple(CoreTensor(t.name, t.dtype, t.dims) for t in core.inputs),
            tuple(CoreTensor(t.name, t.dtype, t.dims) for t in core.outputs),
        )
    names = {t.name for t in io.inputs}
    for key in core.fixed_dims:
        if key not in names:
            problems.append(
                f"model.fixed_dims.{key}: the graph has no input '{key}'; inputs: {sorted(names)}"
            )

    def convert(t: GraphTensor, is_input: bool) -> CoreTensor:
        if len(t.shape) == 1:
            return CoreTensor(t.name, t.dtype, (1,), reshape=True)
        dims = tuple(-1 if d is None else d for d in t.shape[1:])
        fixed = core.fixed_dims.get(t.name) if is_input else None
        if fixed is not None:
            if len(fixed) != len(dims) or any(
                d not in (-1, f) for d, f in zip(dims, fixed, strict=False)
            ):
                problems.append(
                    f"model.fixed_dims.{t.name}: {list(fixed)} does not fit the graph's dims "
                    f"{list(dims)} (batch dim excluded); give {len(dims)} sizes"
                )
            else:
                dims = tuple(fixed)
        if is_input and -1 in dims and not core.same_shape_batches:
            problems.append(
                f"model: graph input '{t.name}' has dynamic dims {list(dims)} besides the batch "
                "dim, and Triton's dynamic batcher joins only requests of one shape unless the "
                "model takes ragged batches (ONNX Runtime and TensorRT plans do not); fix them "
                f"with fixed_dims = {{ {t.name} = [...] }} (and pad to them in preprocess), or "
                "set same_shape_batches = true to batch only requests of equal shapes"
            )
        return CoreTensor(t.name, t.dtype, dims)

    return (
        tuple(convert(t, True) for t in io.inputs),
        tuple(convert(t, False) for t in io.outputs),
    )


def core_files(pipeline: Pipeline, checked: Checked, repository: Path,
               implicit_state: SequenceBatching | None = None) -> dict[Path, str]:  # fmt: skip
    """The core model's config in each of its sets
    (:func:`~builders.pipeline.model_configs.core_sets`) and an empty ``.gitkeep`` in each
    version folder (``make artifacts`` fills them). With ``implicit_state`` (the sequence
    batcher and the states of a core that returns state), the TensorRT plan keeps the state
    itself: its config declares neither the state inputs nor the state outputs."""
    core = pipeline.core
    folder = repository / core.model
    states = implicit_state.states if implicit_state else ()
    hidden = {s.input_name for s in states} | {s.output_name for s in states}
    files = {}
    for config_set in core_sets(core):
        inputs, outputs = checked.core_inputs, checked.core_outputs
        implicit = implicit_state if config_set == DEFAULT_SET and checked.tensorrt else None
        if implicit is not None:
            inputs = tuple(t for t in inputs if t.name not in hidden)
            outputs = tuple(t for t in outputs if t.name not in hidden)
        files[folder / set_file(config_set)] = core_config(
            pipeline, core, inputs, outputs, config_set, checked.tensorrt, implicit_state=implicit
        )
    for version in version_folders(core):
        files[folder / str(version) / ".gitkeep"] = ""
    return files
