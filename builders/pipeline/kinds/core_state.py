"""The session-step-class kind: a stateful description whose core graph keeps the session's
state and whose CPU sets run a hand-written step class (``[[sequence.state]]``, ``[session]
step_class``, ``[session] reference``; the types: :mod:`tritonrepo.description.schema.stateful`).
Without ``step_class``, ``[[sequence.state]]`` is the session kind's
(:mod:`builders.pipeline.kinds.session`).

One model serves under the session's name: ``config.pbtxt`` runs the stateful graph as a
TensorRT plan with Triton's implicit state (:func:`graph_config`); ``configs/cpu.pbtxt`` and
``configs/torch_gpu.pbtxt`` run the session step class, which keeps the state per correlation
ID itself (:func:`step_class_config`).

Checked (:meth:`CoreStateKind.check`): the model against the repository, the step class and
the reference imported, the models the step class calls
(:mod:`builders.pipeline.kinds.model_calls`), the graph's declared I/O, then the sample sessions
and the proof of the built graph event by event (:mod:`builders.pipeline.kinds.core_state_proof`);
the declared ``[probe]``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from builders.pipeline.config_writer import (
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
from builders.pipeline.kinds.base import (
    Checked,
    check_clashes,
    import_function,
    raise_problems,
)
from builders.pipeline.kinds.core_state_proof import prove_built_graph
from builders.pipeline.kinds.declared import probe_table_json
from builders.pipeline.kinds.model_calls import check_calls
from builders.pipeline.kinds.sample_checks import PROBE_LIMIT_BYTES, probe_json, sample_sessions
from builders.pipeline.model_configs import sequence_controls, tensor_configs
from tritonrepo.description import Pipeline
from tritonrepo_client.control.model_calls import CALLS_PARAMETER
from tritonrepo_format.config_sets import DEFAULT_SET, set_file
from tritonrepo_format.roles import PROBE_PARAMETER


def _sequence_batching(pipeline: Pipeline, with_state: bool, delay_us: int) -> SequenceBatching:
    """``sequence_batching``: the idle timeout, the controls, the state (``with_state``) and the
    Oldest strategy with ``delay_us`` of queue delay."""
    sequence, core_state = pipeline.sequence, pipeline.core_state
    assert sequence is not None and core_state is not None
    states = tuple(
        SequenceState(s.input, s.output, s.dtype, s.dims, s.initial_name) for s in core_state.states
    )
    candidates = core_state.max_candidate_sequences or sequence.max_candidate_sequences
    return SequenceBatching(
        sequence.idle_timeout_us,
        sequence_controls(sequence),
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


def _check_declared_io(pipeline: Pipeline, problems: list[str]) -> None:
    """The graph's declared I/O (``[[model.input]]``/``[[model.output]]``) is the pipeline's."""
    for kind, declared, own in (("input", pipeline.core.inputs, pipeline.inputs),
                                ("output", pipeline.core.outputs, pipeline.outputs)):  # fmt: skip
        if [(t.name, t.dtype, t.dims) for t in declared] != [
            (t.name, t.dtype, t.dims) for t in own
        ]:
            problems.append(f"model.{kind}: with state in the core, the graph's {kind}s are the "
                            f"pipeline's [[{kind}]] tables; declare the same")  # fmt: skip


class CoreStateKind:
    """The kind of a stateful description whose CPU sets run a hand-written session step class
    (module docstring)."""

    name = "session step class"
    suite = "session_suite:SessionSuite"  # the generated tests' suite (tests/)

    def check(self, pipeline: Pipeline, repository: Path, owned: set[str],
              force: bool) -> Checked:  # fmt: skip
        """:meth:`builders.pipeline.kinds.base.Kind.check` (module docstring)."""
        core_state = pipeline.core_state
        assert core_state is not None
        problems: list[str] = []
        check_clashes(pipeline, repository, owned, force, problems)
        step_class = import_function(core_state.step_class, "session.step_class", problems)
        if step_class is not None and not isinstance(step_class, type):
            problems.append(f"session.step_class: {core_state.step_class} is not a class; give "
                            "a PythonStep subclass")  # fmt: skip
        reference = import_function(core_state.reference, "session.reference", problems)
        make_samples = import_function(pipeline.samples, "samples.function", problems)
        check_calls(core_state.calls, "session.calls", repository, problems)
        _check_declared_io(pipeline, problems)
        probe, proof = None, None
        sessions = None
        if make_samples is not None and not problems:
            sessions = sample_sessions(pipeline, make_samples, problems)
        if sessions is not None:
            probe = probe_json(pipeline, sessions[0])
            if len(probe) > PROBE_LIMIT_BYTES:
                problems.append(f"samples.function: the smallest event of session 0 is "
                                f"{len(probe)} bytes as JSON, over {PROBE_LIMIT_BYTES} for the "
                                "health probe in the config; add a smaller one")  # fmt: skip
            proof = prove_built_graph(pipeline, repository, sessions, reference, problems)
        raise_problems(pipeline, problems)
        if proof is not None:  # one line, like the build's batch parity
            print(f"{pipeline.name}: the stateful graph proven event by event on "
                  f"{proof.sessions} sample sessions ({proof.events} events) against "
                  f"{core_state.reference}: max abs diff {proof.max_abs_diff:.3g}")  # fmt: skip
        checked = Checked((), (), probe, None)
        declared = probe_table_json(pipeline, problems)  # a [probe] table wins
        raise_problems(pipeline, problems)
        return checked if declared is None else replace(checked, probe=declared)

    def files(
        self, pipeline: Pipeline, checked: Checked, repository: Path, root: Path
    ) -> dict[Path, str]:
        """:meth:`builders.pipeline.kinds.base.Kind.files`: the graph's config, the step
        class's sets, the step class's ``model.py`` (in the first version folder) and the
        generated test module (:class:`tests.session_suite.SessionSuite`)."""
        assert pipeline.core_state is not None
        folder = repository / pipeline.core.model
        files = {folder / set_file(DEFAULT_SET): graph_config(pipeline, checked.probe)}
        for config_set in pipeline.core_state.deployments:
            files[folder / set_file(config_set)] = step_class_config(
                pipeline, config_set, checked.probe
            )
        files[folder / str(pipeline.core.versions[0]) / "model.py"] = model_py(pipeline)
        if pipeline.tests:
            path = root / "tests" / "pipelines" / f"test_{pipeline.name}.py"
            files[path] = test_module(pipeline, self.suite)
        return files


CORE_STATE = CoreStateKind()
