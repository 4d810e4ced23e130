"""The files of a pipeline with state in the core (:mod:`tritonrepo.description.core_state`): one
model under the session's name, whose ``config.pbtxt`` serves the stateful graph as a TensorRT
plan with Triton's implicit state and whose ``configs/cpu.pbtxt`` and
``configs/torch_gpu.pbtxt`` serve the session step class (no I/O here)."""

from __future__ import annotations

from pathlib import Path

from builders.pipeline.config_writer import (
    ControlInput,
    InstanceGroup,
    ModelConfig,
    SequenceBatching,
    SequenceState,
    config_text,
)
from builders.pipeline.generated_files import (
    first_fitting,
    header_comment,
    python_model,
    test_module,
)
from builders.pipeline.model_configs import tensor_configs
from tritonrepo.description import Pipeline
from tritonrepo.paths import REPO_ROOT
from tritonrepo_client.control.model_calls import CALLS_PARAMETER
from tritonrepo_client.model_repository.config_sets import DEFAULT_SET, set_file

PROBE_PARAMETER = "tritonrepo_probe"


CONTROL_KINDS = {"start": "START", "end": "END", "ready": "READY", "corrid": "CORRID"}


def _sequence_batching(pipeline: Pipeline, with_state: bool, delay_us: int) -> SequenceBatching:
    """``sequence_batching``: the idle timeout, the controls, the state (``with_state``) and the
    Oldest strategy with ``delay_us`` of queue delay."""
    sequence, core_state = pipeline.sequence, pipeline.core_state
    assert sequence is not None and core_state is not None
    controls = tuple(
        ControlInput(name, CONTROL_KINDS[key]) for key, name in sequence.controls.items() if name
    )
    states = tuple(
        SequenceState(s.input, s.output, s.dtype, s.dims, s.initial_name) for s in core_state.states
    )
    candidates = core_state.max_candidate_sequences or sequence.max_candidate_sequences
    return SequenceBatching(
        sequence.idle_timeout_us,
        controls,
        candidates,
        delay_us,
        states=states if with_state else (),
    )


def graph_config(pipeline: Pipeline, probe: str | None) -> str:
    """``config.pbtxt``: the stateful core graph as a TensorRT plan (``[model]``), its state
    kept by Triton (implicit state, zeros at START)."""
    core = pipeline.core
    deployment = core.deployments[DEFAULT_SET]
    parameters = dict(deployment.parameters)
    if probe is not None:
        parameters[PROBE_PARAMETER] = probe
    config = ModelConfig(
        name=core.model,
        platform="tensorrt_plan",
        max_batch_size=pipeline.max_batch_size,
        inputs=tensor_configs(pipeline.inputs),
        outputs=tensor_configs(pipeline.outputs),
        sequence_batching=_sequence_batching(pipeline, True, deployment.max_queue_delay_us),
        instance_group=InstanceGroup(deployment.instances, "KIND_GPU"),
        parameters=parameters,
        comment=header_comment(
            pipeline, pipeline.summary, pipeline.doc, deployment.doc or core.doc
        ),
        scheduling_first=True,
    )
    return config_text(config)


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
    config = ModelConfig(
        name=session.model,
        backend="python",
        max_batch_size=pipeline.max_batch_size,
        inputs=tensor_configs(pipeline.inputs),
        outputs=tensor_configs(pipeline.outputs, labels=True),
        sequence_batching=_sequence_batching(pipeline, False, sequence.max_queue_delay_us),
        instance_group=InstanceGroup(deployment.instances, "KIND_CPU"),
        parameters=parameters,
        comment=header_comment(pipeline, deployment.doc or session.doc),
        scheduling_first=True,
    )
    return config_text(config)


def model_py(pipeline: Pipeline) -> str:
    """The session step's ``model.py``: ``TritonPythonModel`` as a subclass of the step class."""
    assert pipeline.core_state is not None
    ref = pipeline.core_state.step_class
    sets = ", ".join(f"configs/{s}.pbtxt" for s in pipeline.core_state.deployments)
    candidates = (
        f'"""{pipeline.name} session step ({sets}; logic: {ref})."""',
        f'"""{pipeline.name} session step (logic: {ref})."""',
    )
    return python_model(first_fitting(candidates), ref)


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
        path = REPO_ROOT / "tests" / "pipelines" / f"test_{pipeline.name}.py"
        files[path] = test_module(pipeline, "session_suite:SessionSuite")
    return files
