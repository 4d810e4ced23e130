"""The session kind: a stateful description whose state is kept by its ``[session]`` step
and/or comes out of its core model (``[sequence]``, ``[session] step``, ``[[sequence.state]]``,
``[model]``, ``[postprocess] function``, ``[session] reference``).

Served by two models: the session model ``<name>`` (Python backend, ``sequence_batching``:
:class:`tritonrepo.pipelines.session_step.SessionStep`), which keeps each session's state, runs
the step on the event, calls the core model through BLS (with the session's core state, which
it takes back from the core's outputs) and runs postprocess; and the core. Where the core's
``config.pbtxt`` is a TensorRT plan, the plan keeps the core state as Triton's implicit state
(:func:`core_sequence`) and the session model's ``config.pbtxt`` sends it each event's
sequence; its ``configs/cpu.pbtxt`` and ``torch_gpu.pbtxt`` feed the state.

Checked (:meth:`SessionKind.check`): the models against the repository, the functions
imported, the core's graph and tensors, then every sample session run in one process event by
event as served, each hand-over checked, each declared state seen to change, the answers
against ``[session] reference`` (:func:`replay_samples`, :mod:`.session_proof`); the declared
``ragged_inputs`` and ``[probe]``. Its files (:meth:`SessionKind.files`): the session model's
configs (:func:`session_config`) and ``model.py``, the core's configs and version folders, the
generated test module (:class:`tests.session_suite.SessionSuite`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from builders.pipeline.config_writer import (
    InstanceGroup,
    ModelConfig,
    SequenceBatching,
    SequenceState,
    config_text,
)
from builders.pipeline.generated_files import (
    header_comment,
    step_model_py,
    tensor_summary,
    test_module,
)
from builders.pipeline.in_process import Replay
from builders.pipeline.kinds.base import (
    Checked,
    check_clashes,
    compare_tensors,
    import_function,
    raise_problems,
    tensorrt_parses,
)
from builders.pipeline.kinds.core_model import core_files, core_graph, core_tensors
from builders.pipeline.kinds.declared import check_ragged_inputs, probe_table_json
from builders.pipeline.kinds.sample_checks import (
    PROBE_LIMIT_BYTES,
    check_core_outputs,
    probe_json,
    quiet_session_options,
    sample_sessions,
)
from builders.pipeline.kinds.session_proof import (
    SessionProof,
    check_states_change,
    compare_with_reference,
    replay_sessions,
    state_hint,
)
from builders.pipeline.model_configs import (
    CODE_ROOT,
    CoreTensor,
    sequence_controls,
    tensor_configs,
)
from tritonrepo.description import Pipeline
from tritonrepo_client.control.model_calls import CALLS_PARAMETER
from tritonrepo_format.config_sets import CPU_SET, DEFAULT_SET, TORCH_GPU_SET, set_file
from tritonrepo_format.dtypes import BY_NAME
from tritonrepo_format.roles import PROBE_PARAMETER

SESSION_CLASS = "tritonrepo.pipelines.session_step:SessionStep"
SESSION_NOTE = (
    "One event per request; each instance keeps its own sessions (Triton routes every\n"
    "request of a sequence to one instance). Oldest strategy: up to\n"
    "max_candidate_sequences open sessions per instance, batched across sessions."
)


FED_NOTE = (
    "The core returns the session's state ([[sequence.state]]): this model keeps it per\n"
    "session, feeds it to the core with every event (zeros at START) and keeps the core's\n"
    "state outputs of that event for the next one."
)
IMPLICIT_NOTE = (
    "The core returns the session's state ([[sequence.state]]) and keeps it itself\n"
    "(Triton's implicit state, config.pbtxt of the core): each event is sent to it with this\n"
    "session's correlation ID and START/END. configs/cpu.pbtxt feeds the state instead."
)


def core_sequence(pipeline: Pipeline) -> SequenceBatching | None:
    """The core's sequence batcher where a TensorRT plan keeps the session's state (Triton's
    implicit state: each ``[[sequence.state]]`` zeros at START), or None without states."""
    sequence, session = pipeline.sequence, pipeline.session
    assert sequence is not None and session is not None
    if not session.states:
        return None
    states = tuple(
        SequenceState(s.input, s.output, s.dtype, s.dims, s.initial_name) for s in session.states
    )
    delay = pipeline.core.deployments[DEFAULT_SET].max_queue_delay_us
    return SequenceBatching(sequence.idle_timeout_us, (), sequence.max_candidate_sequences,
                            delay, states=states)  # fmt: skip


def session_config(
    pipeline: Pipeline, core_inputs: Sequence[CoreTensor], core_outputs: Sequence[CoreTensor],
    probe: str | None, implicit: bool = False,
) -> str:  # fmt: skip
    """The session model's ``config.pbtxt`` (or ``configs/<set>.pbtxt``): Python backend,
    ``sequence_batching`` (Oldest strategy, the description's idle timeout and controls) and
    the parameters of :class:`tritonrepo.pipelines.session_step.SessionStep`. With states, the
    session model feeds them to the core, or, ``implicit``, the core keeps them."""
    sequence, session = pipeline.sequence, pipeline.session
    assert sequence is not None and session is not None
    state_inputs = {s.input for s in session.states}
    state_outputs = {s.output for s in session.states}
    core_inputs = [c for c in core_inputs if c.name not in state_inputs]
    if implicit:
        core_outputs = [c for c in core_outputs if c.name not in state_outputs]
    step_outputs = [*(c.as_tensor() for c in core_inputs), *pipeline.preprocess.outputs]
    core_batch = min(
        d.max_batch_size or pipeline.max_batch_size for d in pipeline.core.deployments.values()
    )
    outputs = [
        {"name": t.name, "data_type": BY_NAME[t.dtype].config_name, "dims": list(t.dims)}
        for t in step_outputs
    ]
    parameters = {
        **({"step": session.step} if session.step else {}),
        "postprocess": pipeline.postprocess.function or "",
        "code_root": CODE_ROOT,
        "core_model": pipeline.core.model,
        "core_inputs": ",".join(c.name for c in core_inputs),
        "core_outputs": ",".join(c.name for c in core_outputs),
        "core_max_batch_size": str(core_batch),
        "step_outputs": json.dumps(outputs, separators=(",", ":")),
        "max_sessions": str(sequence.max_sessions),
        "controls": f"{sequence.controls['start']},{sequence.controls['end']}",
        CALLS_PARAMETER: pipeline.core.model,
    }
    if session.states:
        states = [{"input": s.input, "output": s.output, "data_type": BY_NAME[s.dtype].config_name,
                   "dims": list(s.dims)} for s in session.states]  # fmt: skip
        parameters["core_states"] = json.dumps(states, separators=(",", ":"))
        if implicit:
            parameters["implicit_state"] = "1"
    if probe is not None:
        parameters[PROBE_PARAMETER] = probe
    note = SESSION_NOTE
    if session.states:
        note += "\n" + (IMPLICIT_NOTE if implicit else FED_NOTE)
    batching = SequenceBatching(
        sequence.idle_timeout_us,
        sequence_controls(sequence),
        sequence.max_candidate_sequences,
        sequence.max_queue_delay_us,
        note=note,
    )
    config = ModelConfig(
        name=session.model,
        backend="python",
        max_batch_size=pipeline.max_batch_size,
        inputs=tensor_configs(pipeline.inputs),
        outputs=tensor_configs(pipeline.outputs, labels=True),
        instance_group=InstanceGroup(session.instances, "KIND_CPU"),
        sequence_batching=batching,
        parameters=parameters,
        comment=header_comment(pipeline, pipeline.summary, session.doc or pipeline.doc),
    )
    return config_text(config)


def replay_samples(
    pipeline: Pipeline,
    make_samples: Callable[[], Any],
    model: Any,
    core_inputs: Sequence[CoreTensor],
    problems: list[str],
    reference: Callable[..., Any] | None = None,
) -> tuple[str | None, SessionProof | None]:
    """Every sample session event by event as served (:mod:`.session_proof`): the step (from
    START), the core model (ONNX Runtime; ``model`` an ``onnx.ModelProto``, None for a
    ``builder`` core: nothing is run) on its outputs and the state the core returned, the state
    taken from the core's outputs, postprocess; each hand-over checked, each declared state
    seen to change, every answer compared with ``reference`` when given. Returns the probe JSON
    (session 0's smallest event) and the proof; problems are appended to ``problems``."""
    session = pipeline.session
    assert session is not None
    sessions = sample_sessions(pipeline, make_samples, problems)
    if sessions is None:
        return None, None
    probe = probe_json(pipeline, sessions[0])
    if model is None:  # a builder core: nothing to run the step's outputs through
        return probe, None
    if len(probe) > PROBE_LIMIT_BYTES:
        problems.append(
            f"samples.function: the smallest event of session 0 is {len(probe)} bytes as JSON, "
            f"over {PROBE_LIMIT_BYTES} for the health probe in the config; add a smaller one"
        )
    replay = Replay(pipeline, model.SerializeToString(), quiet_session_options())
    runs = replay_sessions(pipeline, replay, sessions, core_inputs, problems)
    if runs is None or problems:
        return probe, None
    feeds = {k: np.concatenate([r.feeds[k] for rs in runs for r in rs]) for k in runs[0][0].feeds}
    results = replay.runner.run_core(feeds)  # all events at once: the declared shapes
    check_core_outputs(model, feeds, replay.runner.names, results, problems, f"{pipeline.name}: "
                       "model")  # fmt: skip
    responses = [r.response for rs in runs for r in rs]
    joined = {k: np.concatenate([np.asarray(x[k]) for x in responses]) for k in responses[0]}
    compare_tensors(joined, pipeline.outputs, "postprocess.function", "the response tensor",
                    problems, "the ONNX graph's outputs nor postprocess's outputs")  # fmt: skip
    if problems:
        return probe, None
    changed = check_states_change(pipeline, runs, problems)
    worst = None
    if reference is not None:
        worst = compare_with_reference(pipeline, reference, sessions, runs, problems)
    events = sum(len(rs) for rs in runs)
    return probe, SessionProof(len(runs), events, worst, changed)


class SessionKind:
    """The kind of a stateful description with its state in the session step (module
    docstring)."""

    name = "session"
    suite = "session_suite:SessionSuite"  # the generated tests' suite (tests/)

    def check(self, pipeline: Pipeline, repository: Path, owned: set[str],
              force: bool) -> Checked:  # fmt: skip
        """:meth:`builders.pipeline.kinds.base.Kind.check` (module docstring)."""
        assert pipeline.session is not None
        problems: list[str] = []
        check_clashes(pipeline, repository, owned, force, problems)
        session = pipeline.session
        step = import_function(session.step or None, "session.step", problems)
        post = import_function(pipeline.postprocess.function, "postprocess.function", problems)
        make_samples = import_function(pipeline.samples, "samples.function", problems)
        reference = import_function(session.reference, "session.reference", problems)
        model, io = core_graph(pipeline, problems)
        core_inputs, core_outputs = core_tensors(pipeline.core, io, problems)
        hint = state_hint(pipeline, core_inputs, core_outputs)
        if hint and not problems:
            print(hint)
        probe, proof = None, None
        ready = step is not None or not session.step
        if make_samples is not None and ready and post is not None and not problems:
            probe, proof = replay_samples(pipeline, make_samples, model, core_inputs, problems,
                                          reference)  # fmt: skip
        raise_problems(pipeline, problems)
        if proof is not None:
            print(proof.line(pipeline))
        tensorrt = model is None or tensorrt_parses(model)
        checked = Checked(core_inputs, core_outputs, probe, model, tensorrt)
        check_ragged_inputs(pipeline, core_inputs, core_outputs, problems)
        declared = probe_table_json(pipeline, problems)  # a [probe] table wins
        raise_problems(pipeline, problems)
        return checked if declared is None else replace(checked, probe=declared)

    def files(
        self, pipeline: Pipeline, checked: Checked, repository: Path, root: Path
    ) -> dict[Path, str]:
        """:meth:`builders.pipeline.kinds.base.Kind.files` (module docstring)."""
        session = pipeline.session
        assert session is not None
        folder = repository / session.model
        implicit = core_sequence(pipeline) if checked.tensorrt else None
        ins, outs, probe = checked.core_inputs, checked.core_outputs, checked.probe
        summary = tensor_summary(pipeline.inputs, pipeline.outputs)
        files = {
            folder / "config.pbtxt": session_config(pipeline, ins, outs, probe, bool(implicit)),
            folder / "1" / "model.py": step_model_py(
                pipeline,
                "session model",
                summary,
                session.step or "the request's tensors",
                SESSION_CLASS,
            ),
        }
        if implicit is not None:  # the CPU sets feed the state: their cores run ONNX Runtime
            for config_set in (CPU_SET, TORCH_GPU_SET):
                files[folder / set_file(config_set)] = session_config(pipeline, ins, outs, probe)
        files.update(core_files(pipeline, checked, repository, implicit))
        if pipeline.tests:
            path = root / "tests" / "pipelines" / f"test_{pipeline.name}.py"
            files[path] = test_module(pipeline, self.suite)
        return files


SESSION = SessionKind()
