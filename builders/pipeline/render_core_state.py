"""The files of a pipeline with state in the core (:mod:`tritonrepo.description.core_state`): one
model under the session's name, whose ``config.pbtxt`` serves the stateful graph as a TensorRT
plan with Triton's implicit state and whose ``configs/cpu.pbtxt`` and
``configs/torch_gpu.pbtxt`` serve the session step class (no I/O here)."""

from __future__ import annotations

from pathlib import Path

from builders.pipeline.render import (
    CONTROL_KINDS,
    LINE_LENGTH,
    _dims,
    _header,
    _io,
    _parameters,
)
from tritonrepo.description import Pipeline
from tritonrepo_client.control.model_calls import CALLS_PARAMETER
from tritonrepo_client.model_repository.config_sets import DEFAULT_SET, set_file

PROBE_PARAMETER = "tritonrepo_probe"


def _triton_type(dtype: str) -> str:
    return "TYPE_" + ("STRING" if dtype == "BYTES" else dtype)


def _sequence_block(pipeline: Pipeline, with_state: bool, delay_us: int) -> str:
    """``sequence_batching``: the idle timeout, the controls, the state (``with_state``) and the
    Oldest strategy with ``delay_us`` of queue delay."""
    sequence, core_state = pipeline.sequence, pipeline.core_state
    assert sequence is not None and core_state is not None
    controls = []
    for key, name in sequence.controls.items():
        if name:
            kind = f"CONTROL_SEQUENCE_{CONTROL_KINDS[key]}"
            value = "data_type: TYPE_UINT64" if key == "corrid" else "int32_false_true: [ 0, 1 ]"
            controls.append(f'    {{ name: "{name}" control [ {{ kind: {kind} {value} }} ] }}')
    text = (
        "sequence_batching {\n"
        f"  max_sequence_idle_microseconds: {sequence.idle_timeout_us}\n"
        "  control_input [\n" + ",\n".join(controls) + "\n  ]\n"
    )
    if with_state:
        states = []
        for s in core_state.states:
            kind, dims = _triton_type(s.dtype), _dims(s.dims)
            states.append(
                "    {\n"
                f'      input_name: "{s.input}"\n'
                f'      output_name: "{s.output}"\n'
                f"      data_type: {kind}\n"
                f"      dims: {dims}\n"
                f"      initial_state {{ data_type: {kind} dims: {dims} zero_data: true "
                f'name: "{s.initial_name}" }}\n'
                "    }"
            )
        text += "  state [\n" + ",\n".join(states) + "\n  ]\n"
    candidates = core_state.max_candidate_sequences or sequence.max_candidate_sequences
    return text + (
        f"  oldest {{ max_candidate_sequences: {candidates} "
        f"max_queue_delay_microseconds: {delay_us} }}\n}}\n"
    )


def graph_config(pipeline: Pipeline, probe: str | None) -> str:
    """``config.pbtxt``: the stateful core graph as a TensorRT plan (``[model]``), its state
    kept by Triton (implicit state, zeros at START)."""
    core = pipeline.core
    deployment = core.deployments[DEFAULT_SET]
    parameters = dict(deployment.parameters)
    if probe is not None:
        parameters[PROBE_PARAMETER] = probe
    return "".join(
        [
            _header(pipeline, pipeline.summary, pipeline.doc, deployment.doc or core.doc),
            f'name: "{core.model}"\nplatform: "tensorrt_plan"\n',
            f"max_batch_size: {pipeline.max_batch_size}\n",
            _io("input", pipeline.inputs),
            _io("output", pipeline.outputs),
            _sequence_block(pipeline, True, deployment.max_queue_delay_us),
            f"instance_group [ {{ count: {deployment.instances} kind: KIND_GPU }} ]\n",
            _parameters(parameters),
        ]
    )


def step_class_config(pipeline: Pipeline, config_set: str, probe: str | None) -> str:
    """``configs/<set>.pbtxt``: the session step class (Python backend) keeping the state per
    correlation ID, with the models it calls as ``tritonrepo_calls``."""
    sequence, core_state, session = pipeline.sequence, pipeline.core_state, pipeline.session
    assert sequence is not None and core_state is not None and session is not None
    deployment = core_state.deployments[config_set]
    parameters = {"max_sessions": str(sequence.max_sessions), **deployment.parameters}
    if core_state.calls:
        parameters[CALLS_PARAMETER] = ",".join(c.model for c in core_state.calls)
    if probe is not None:
        parameters[PROBE_PARAMETER] = probe
    return "".join(
        [
            _header(pipeline, deployment.doc or session.doc),
            f'name: "{session.model}"\nbackend: "python"\n',
            f"max_batch_size: {pipeline.max_batch_size}\n",
            _io("input", pipeline.inputs),
            _io("output", pipeline.outputs, labels=True),
            _sequence_block(pipeline, False, sequence.max_queue_delay_us),
            f"instance_group [ {{ count: {deployment.instances} kind: KIND_CPU }} ]\n",
            _parameters(parameters),
        ]
    )


def model_py(pipeline: Pipeline) -> str:
    """The session step's ``model.py``: ``TritonPythonModel`` as a subclass of the step class."""
    assert pipeline.core_state is not None
    ref = pipeline.core_state.step_class
    module, _, cls = ref.partition(":")
    sets = ", ".join(f"configs/{s}.pbtxt" for s in pipeline.core_state.deployments)
    first = f'"""{pipeline.name} session step ({sets}; logic: {ref})."""'
    if len(first) > LINE_LENGTH:
        first = f'"""{pipeline.name} session step (logic: {ref})."""'
    return (
        f"{first}\n\n"
        f"from {module} import {cls}\n\n\n"
        f"class TritonPythonModel({cls}):\n"
        f'    """Python-backend entry point; initialize/execute/finalize come from {cls}."""\n'
    )


def core_state_files(pipeline: Pipeline, checked, repository: Path) -> dict[Path, str]:
    """Every file of the pipeline: absolute path → text (``checked``: the generator's
    :class:`builders.pipeline.checks.Checked`, for the probe)."""
    assert pipeline.core_state is not None
    folder = repository / pipeline.core.model
    files = {folder / set_file(DEFAULT_SET): graph_config(pipeline, checked.probe)}
    for config_set in pipeline.core_state.deployments:
        files[folder / set_file(config_set)] = step_class_config(
            pipeline, config_set, checked.probe
        )
    files[folder / str(pipeline.core.versions[0]) / "model.py"] = model_py(pipeline)
    if pipeline.tests:
        from builders.pipeline.render import test_module
        from tritonrepo.paths import REPO_ROOT

        files[REPO_ROOT / "tests" / "pipelines" / f"test_{pipeline.name}.py"] = test_module(
            pipeline
        )
    return files
