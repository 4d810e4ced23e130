"""The session kind: a stateful description whose state is kept by its ``[session]`` step
(``[sequence]``, ``[session] step``, ``[model]``, ``[postprocess] function``).

Served by two models: the session model ``<name>`` (Python backend, ``sequence_batching``:
:class:`tritonrepo.pipelines.session_step.SessionStep`), which keeps each session's state, runs
the step on the event, calls the core model through BLS and runs postprocess; and the core.

Checked (:meth:`SessionKind.check`): the models against the repository, the functions
imported, the core's graph and tensors, then every sample session replayed in one process from
START, each hand-over checked (:func:`replay_samples`); the declared ``ragged_inputs`` and
``[probe]``. Its files (:meth:`SessionKind.files`): the session model's config
(:func:`session_config`) and ``model.py``, the core's configs and version folders, the
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
    raised_at,
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
from builders.pipeline.model_configs import (
    CODE_ROOT,
    CoreTensor,
    sequence_controls,
    tensor_configs,
)
from tritonrepo.description import Pipeline
from tritonrepo_client.control.model_calls import CALLS_PARAMETER
from tritonrepo_format.dtypes import BY_NAME
from tritonrepo_format.roles import PROBE_PARAMETER

SESSION_CLASS = "tritonrepo.pipelines.session_step:SessionStep"
SESSION_NOTE = (
    "One event per request; each instance keeps its own sessions (Triton routes every\n"
    "request of a sequence to one instance). Oldest strategy: up to\n"
    "max_candidate_sequences open sessions per instance, batched across sessions."
)


def session_config(
    pipeline: Pipeline, core_inputs: Sequence[CoreTensor], core_outputs: Sequence[CoreTensor],
    probe: str | None,
) -> str:  # fmt: skip
    """The session model's ``config.pbtxt``: Python backend, ``sequence_batching`` (Oldest
    strategy, the description's idle timeout and controls) and the parameters of
    :class:`tritonrepo.pipelines.session_step.SessionStep`."""
    sequence, session = pipeline.sequence, pipeline.session
    assert sequence is not None and session is not None
    step_outputs = [*(c.as_tensor() for c in core_inputs), *pipeline.preprocess.outputs]
    core_batch = min(
        d.max_batch_size or pipeline.max_batch_size for d in pipeline.core.deployments.values()
    )
    outputs = [
        {"name": t.name, "data_type": BY_NAME[t.dtype].config_name, "dims": list(t.dims)}
        for t in step_outputs
    ]
    parameters = {
        "step": session.step,
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
    if probe is not None:
        parameters[PROBE_PARAMETER] = probe
    batching = SequenceBatching(
        sequence.idle_timeout_us,
        sequence_controls(sequence),
        sequence.max_candidate_sequences,
        sequence.max_queue_delay_us,
        note=SESSION_NOTE,
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
) -> str | None:
    """Every sample session through the step (from START, one event at a time), the core model
    (ONNX Runtime, ``model`` an ``onnx.ModelProto`` or None for a ``builder`` core) and
    postprocess, each hand-over checked; the probe JSON (session 0's smallest event). Problems
    are appended to ``problems``."""
    session = pipeline.session
    assert session is not None
    sessions = sample_sessions(pipeline, make_samples, problems)
    if sessions is None:
        return None
    probe = probe_json(pipeline, sessions[0])
    if model is None:  # a builder core: nothing to run the step's outputs through
        return probe
    if len(probe) > PROBE_LIMIT_BYTES:
        problems.append(
            f"samples.function: the smallest event of session 0 is {len(probe)} bytes as JSON, "
            f"over {PROBE_LIMIT_BYTES} for the health probe in the config; add a smaller one"
        )
    replay = Replay(pipeline, model.SerializeToString(), quiet_session_options())
    field = "session.step"
    graph_inputs = tuple(c.as_tensor() for c in core_inputs)
    extras = pipeline.preprocess.outputs
    joined: list[dict[str, np.ndarray]] = []
    for i, events in enumerate(sessions):
        state = None
        for j in range(len(np.asarray(next(iter(events.values()))))):
            event = {k: np.asarray(v)[j : j + 1] for k, v in events.items()}
            try:
                result = replay.step(state, event)
            except Exception as exc:
                problems.append(f"{field}: {session.step} failed on session {i} event "
                                f"{j}{raised_at(exc)}: {exc!r}")  # fmt: skip
                return probe
            if not isinstance(result, tuple) or len(result) != 2:
                problems.append(f"{field}: returned a {type(result).__name__}; return the pair "
                                "(state, outputs)")  # fmt: skip
                return probe
            state, out = result
            compare_tensors(out, graph_inputs, field, "the core model's input", problems, None)
            compare_tensors(out, extras, field, "declared in session.outputs", problems,
                            "the ONNX graph's inputs nor session.outputs")  # fmt: skip
            unknown = sorted(set(out) - {t.name for t in (*graph_inputs, *extras)})
            if unknown:
                problems.append(f"{field}: returns {unknown}, which the core model does not take; "
                                "declare them as [[session.outputs]], or drop them")  # fmt: skip
            bad = [k for k, v in out.items() if np.asarray(v).shape[:1] != (1,)]
            if bad:
                problems.append(f"{field}: outputs {bad} are not batch 1 (one event per call)")
            if problems:
                return probe
            joined.append(out)
    step_out = {k: np.concatenate([np.asarray(o[k]) for o in joined]) for k in joined[0]}
    feeds = replay.runner.core_feeds(step_out)
    results = replay.runner.run_core(feeds)
    who = f"{pipeline.name}: model"
    check_core_outputs(model, feeds, replay.runner.names, results, problems, who)
    if problems:
        return probe
    try:
        post_out = replay.runner.post(replay.runner.post_inputs(step_out, results))
    except Exception as exc:
        problems.append(f"postprocess.function: {pipeline.postprocess.function} failed on the "
                        f"samples{raised_at(exc)}: {exc!r}")  # fmt: skip
        return probe
    compare_tensors(post_out, pipeline.outputs, "postprocess.function", "the response tensor",
                    problems, "the ONNX graph's outputs nor postprocess's outputs")  # fmt: skip
    return probe


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
        step = import_function(pipeline.session.step, "session.step", problems)
        post = import_function(pipeline.postprocess.function, "postprocess.function", problems)
        make_samples = import_function(pipeline.samples, "samples.function", problems)
        model, io = core_graph(pipeline, problems)
        core_inputs, core_outputs = core_tensors(pipeline.core, io, problems)
        probe = None
        if make_samples is not None and step is not None and post is not None and not problems:
            probe = replay_samples(pipeline, make_samples, model, core_inputs, problems)
        raise_problems(pipeline, problems)
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
        config = session_config(pipeline, checked.core_inputs, checked.core_outputs, checked.probe)
        summary = tensor_summary(pipeline.inputs, pipeline.outputs)
        files = {
            folder / "config.pbtxt": config,
            folder / "1" / "model.py": step_model_py(
                pipeline, "session model", summary, session.step, SESSION_CLASS
            ),
        }
        files.update(core_files(pipeline, checked, repository))
        if pipeline.tests:
            path = root / "tests" / "pipelines" / f"test_{pipeline.name}.py"
            files[path] = test_module(pipeline, self.suite)
        return files


SESSION = SessionKind()
