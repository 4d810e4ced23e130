"""The generator's checks of a stateful description (``[sequence]``): its step, postprocess and
samples functions replayed in one process over the sample sessions, every hand-over checked
(:func:`check_stateful`), before anything is written. The problems read like those of
:mod:`builders.pipeline.checks`, each naming the field and the fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from builders.pipeline.checks import (
    Checked,
    _check_clashes,
    _core_graph,
    _core_tensors,
    _import,
    tensorrt_parses,
)
from builders.pipeline.checks_samples import (
    MIN_SAMPLE_ROWS,
    PROBE_LIMIT_BYTES,
    _check_core_outputs,
    _compare,
    _where,
    probe_json,
    quiet_session_options,
)
from builders.pipeline.in_process import Replay
from tritonrepo.description import DescriptionError, Pipeline

MIN_SESSIONS = 2  # the generated tests interleave two sessions at least


def check_stateful(pipeline: Pipeline, repository: Path, owned: set[str], force: bool) -> Checked:
    """:func:`builders.pipeline.checks.check` for a stateful pipeline.

    Raises:
        DescriptionError: every problem found, nothing written.
    """
    assert pipeline.session is not None
    problems: list[str] = []
    _check_clashes(pipeline, repository, owned, force, problems)
    step = _import(pipeline.session.step, "session.step", problems)
    post = _import(pipeline.postprocess.function, "postprocess.function", problems)
    make_samples = _import(pipeline.samples, "samples.function", problems)
    model, io = _core_graph(pipeline, problems)
    core_inputs, core_outputs = _core_tensors(pipeline, io, problems)
    probe = None
    if make_samples is not None and step is not None and post is not None and not problems:
        probe = _replay_samples(pipeline, make_samples, model, core_inputs, problems)
    if problems:
        raise DescriptionError(pipeline.source, problems)
    return Checked(core_inputs, core_outputs, probe, model, model is None or tensorrt_parses(model))


def _sessions(pipeline: Pipeline, make_samples: Any, problems: list[str]) -> list | None:
    """The sample sessions, checked: a list of at least :data:`MIN_SESSIONS` dicts of request
    tensors, one row per event, :data:`MIN_SAMPLE_ROWS` events in all."""
    field = "samples.function"
    try:
        sessions = make_samples()
    except Exception as exc:
        problems.append(f"{field}: {pipeline.samples}() failed{_where(exc)}: {exc!r}")
        return None
    if not isinstance(sessions, list) or not all(isinstance(s, dict) for s in sessions):
        problems.append(
            f"{field}: a stateful pipeline's samples are sessions: return a list of "
            "{input name: array with one row per event}"
        )
        return None
    for i, events in enumerate(sessions):
        wanted = tuple(t for t in pipeline.inputs if not t.optional or t.name in events)
        where = f"{field} (session {i})"
        _compare(events, wanted, where, "the request tensor", problems, "the samples")
        if len({len(np.asarray(v)) for v in events.values()}) != 1:
            problems.append(f"{field}: session {i}: give every tensor the same number of events")
    total = sum(len(np.asarray(next(iter(s.values())))) for s in sessions if s)
    if len(sessions) < MIN_SESSIONS or total < MIN_SAMPLE_ROWS:
        problems.append(
            f"{field}: returns {len(sessions)} sessions of {total} events in all; give at least "
            f"{MIN_SESSIONS} sessions and {MIN_SAMPLE_ROWS} events (the tests interleave them, "
            "the batch parity check joins them)"
        )
    return None if problems else sessions


def _replay_samples(pipeline, make_samples, model, core_inputs, problems) -> str | None:
    """Every sample session through the step (from START), the core model and postprocess."""
    sessions = _sessions(pipeline, make_samples, problems)
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
                problems.append(f"{field}: {pipeline.session.step} failed on session {i} event "
                                f"{j}{_where(exc)}: {exc!r}")  # fmt: skip
                return probe
            if not isinstance(result, tuple) or len(result) != 2:
                problems.append(f"{field}: returned a {type(result).__name__}; return the pair "
                                "(state, outputs)")  # fmt: skip
                return probe
            state, out = result
            _compare(out, graph_inputs, field, "the core model's input", problems, None)
            _compare(out, extras, field, "declared in session.outputs", problems,
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
    _check_core_outputs(model, feeds, replay.runner.names, results, problems, who)
    if problems:
        return probe
    try:
        post_out = replay.runner.post(replay.runner.post_inputs(step_out, results))
    except Exception as exc:
        problems.append(f"postprocess.function: {pipeline.postprocess.function} failed on the "
                        f"samples{_where(exc)}: {exc!r}")  # fmt: skip
        return probe
    _compare(post_out, pipeline.outputs, "postprocess.function", "the response tensor", problems,
             "the ONNX graph's outputs nor postprocess's outputs")  # fmt: skip
    return probe
