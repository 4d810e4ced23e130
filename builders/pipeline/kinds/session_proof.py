"""The proof of a stateful description on its samples, event by event in the order the session
model serves them (:class:`builders.pipeline.in_process.Replay`): each event's step on the
step's state so far, the core on its outputs and the state the core returned for the previous
event (``[[sequence.state]]``, zeros at START), postprocess on that run's outputs.

Every hand-over is checked as it happens (:func:`replay_sessions`); then each declared state
must change across the samples' events (:func:`check_states_change`: a pair that is not the
model's state stays as fed), and, with ``[session] reference``, every event's response must
equal the reference's answer to the session (:func:`compare_with_reference`): integers exactly,
floats within :data:`ATOL` + :data:`RTOL` x |reference|. A description whose state never
reaches the core (a step that computes it before the core runs, while the model returns it)
fails there, at the first event where it shows. :func:`state_hint` notes a core output that
looks like a state nobody declared.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from builders.pipeline.in_process import EventRun, Replay
from builders.pipeline.kinds.base import compare_tensors, raised_at
from builders.pipeline.model_configs import CoreTensor
from tritonrepo.description import Pipeline, Tensor

ATOL = 1e-5  # the same FP32 network in ONNX Runtime, or the model's own streaming runtime
RTOL = 1e-5
Runs = list[list[EventRun]]  # per sample session, per event


@dataclass(frozen=True)
class SessionProof:
    """What the proof established: sessions and events run; the largest |response - reference|
    over the float outputs (None without a reference); per declared state output, on how many
    events it differed from the state fed in."""

    sessions: int
    events: int
    max_abs_diff: float | None
    changed: Mapping[str, int]

    def line(self, pipeline: Pipeline) -> str:
        """One line for the generator's output, like the build's batch parity."""
        assert pipeline.session is not None
        text = f"{pipeline.name}: {self.sessions} sample sessions ({self.events} events) run "
        text += "event by event"
        if self.changed:
            shown = ", ".join(f"'{k}' changed on {n} of {self.events}" for k, n in
                              self.changed.items())  # fmt: skip
            text += f"; state {shown}"
        if self.max_abs_diff is not None:
            text += (f"; against {pipeline.session.reference}: max abs diff "
                     f"{self.max_abs_diff:.3g}")  # fmt: skip
        else:
            text += "; no [session] reference to compare with"
        return text


def _event(events: Mapping[str, Any], j: int) -> dict[str, np.ndarray]:
    return {k: np.asarray(v)[j : j + 1] for k, v in events.items()}


def replay_sessions(
    pipeline: Pipeline, replay: Replay, sessions: Sequence[Mapping[str, Any]],
    core_inputs: Sequence[CoreTensor], problems: list[str],
) -> Runs | None:  # fmt: skip
    """Every sample session through ``replay`` event by event, the step's outputs of each
    checked against the core's inputs it feeds (``core_inputs`` less the state inputs) and
    the declared ``[[session.outputs]]``; None after a problem (appended)."""
    session = pipeline.session
    assert session is not None
    state_inputs = {s.input for s in session.states}
    field = "session.step" if session.step else "input"
    who = session.step or "the request"
    graph_inputs = tuple(c.as_tensor() for c in core_inputs if c.name not in state_inputs)
    extras = pipeline.preprocess.outputs
    if not session.step:  # the request's tensors go to the core as they are
        request = [(t.name, t.dtype, t.dims) for t in pipeline.inputs]
        core = [(t.name, t.dtype, t.dims) for t in graph_inputs]
        if sorted(request) != sorted(core):
            shown = ", ".join(f"{n} {d} {list(s)}" for n, d, s in core)
            problems.append(
                f"input: without [session] step the request's tensors go to the core as they "
                f"are, and the core takes {shown} (its state inputs aside); declare those as "
                f"[[input]] (got {[n for n, _, _ in request]}), or add a step"
            )
            return None
    runs: Runs = []
    for i, events in enumerate(sessions):
        count = len(np.asarray(next(iter(events.values()))))
        state, core_state, done = None, replay.initial_states(), []
        for j in range(count):
            event = _event(events, j)
            try:
                result = replay.step(state, dict(event))
            except Exception as exc:
                problems.append(f"{field}: {who} failed on session {i} event {j}"
                                f"{raised_at(exc)}: {exc!r}")  # fmt: skip
                return None
            if not isinstance(result, tuple) or len(result) != 2:
                problems.append(f"{field}: returned a {type(result).__name__}; return the pair "
                                "(state, outputs)")  # fmt: skip
                return None
            out = result[1]
            what = "the core model's input"
            compare_tensors(out, graph_inputs, field, what, problems, None)
            compare_tensors(out, extras, field, "declared in session.outputs", problems,
                            "the ONNX graph's inputs nor session.outputs")  # fmt: skip
            fed = sorted(state_inputs & set(out))
            if fed:
                problems.append(f"{field}: returns {fed}, which the session model feeds "
                                "from the core's state outputs ([[sequence.state]]); drop "
                                "them")  # fmt: skip
            known = {t.name for t in (*graph_inputs, *extras)} | state_inputs
            unknown = sorted(set(out) - known)
            if unknown:
                problems.append(f"{field}: returns {unknown}, which the core model does not take; "
                                "declare them as [[session.outputs]], or drop them")  # fmt: skip
            bad = [k for k, v in out.items() if np.asarray(v).shape[:1] != (1,)]
            if bad:
                problems.append(f"{field}: outputs {bad} are not batch 1 (one event per call)")
            if problems:
                return None
            try:
                state, core_state, run = replay.event(state, core_state, event)
            except Exception as exc:
                problems.append(f"model: session {i} event {j}: the core or postprocess failed"
                                f"{raised_at(exc)}: {exc!r}")  # fmt: skip
                return None
            done.append(run)
        runs.append(done)
    return runs


def check_states_change(pipeline: Pipeline, runs: Runs, problems: list[str]) -> dict[str, int]:
    """Per declared state, the events whose state output differs from the state fed in; a
    state that never changes is a problem (the pair is not the model's state)."""
    session = pipeline.session
    assert session is not None
    changed: dict[str, int] = {}
    for i, s in enumerate(session.states):
        n = sum(not np.array_equal(np.asarray(run.core[s.output]), run.feeds[s.input])
                for events in runs for run in events)  # fmt: skip
        changed[s.output] = n
        if n == 0:
            problems.append(
                f"sequence.state[{i}]: the core's output '{s.output}' equals the state fed to "
                f"'{s.input}' on every sample event: it is not the model's next state; give "
                "the output that is (and samples that move it)"
            )
    return changed


def compare_with_reference(
    pipeline: Pipeline, reference: Callable[..., Mapping[str, Any]],
    sessions: Sequence[Mapping[str, Any]], runs: Runs, problems: list[str],
) -> float:  # fmt: skip
    """Every event's response against ``reference(session events)`` (one row per event); the
    largest |difference| over the float outputs. The first differing event of a session is a
    problem naming it."""
    session = pipeline.session
    assert session is not None
    ref_name = session.reference
    worst = 0.0
    for i, (events, done) in enumerate(zip(sessions, runs, strict=True)):
        try:
            want = reference({k: np.asarray(v) for k, v in events.items()})
        except Exception as exc:
            problems.append(f"session.reference: {ref_name} failed on session {i}"
                            f"{raised_at(exc)}: {exc!r}")  # fmt: skip
            return worst
        if not isinstance(want, Mapping):
            problems.append(f"session.reference: {ref_name} returned a {type(want).__name__}; "
                            "return {output: array with one row per event}")  # fmt: skip
            return worst
        for j, run in enumerate(done):
            problem, worst = _compare_event(pipeline.outputs, run.response, want, j, worst)
            if problem:
                hint = (
                    "the state is not carried as the reference carries it"
                    if session.states
                    else "if the model returns its next state, declare it in [[sequence.state]] "
                    "(a step's state is computed before the core runs and never sees its outputs)"
                )
                problems.append(f"session.reference: session {i} event {j}: {problem}; {hint}")
                break
    return worst


def _compare_event(outputs: Sequence[Tensor], got: Mapping[str, Any], want: Mapping[str, Any],
                   j: int, worst: float) -> tuple[str, float]:  # fmt: skip
    """Event ``j``'s response against row ``j`` of the reference: ``('', worst)`` when equal,
    else what differs."""
    for t in outputs:
        if t.name not in want:
            return f"the reference returns no '{t.name}' (got {sorted(want)})", worst
        ref = np.asarray(want[t.name])
        if len(ref) <= j:
            return f"the reference's '{t.name}' has {len(ref)} rows, one per event is needed", worst
        value, expected = np.asarray(got[t.name])[0], ref[j]
        if value.shape != expected.shape:
            return (f"output '{t.name}' has shape {list(value.shape)}, the reference "
                    f"{list(expected.shape)}", worst)  # fmt: skip
        if value.dtype.kind == "f":
            diff = float(np.max(np.abs(value - expected), initial=0.0))
            worst = max(worst, diff)
            if not np.allclose(value, expected, atol=ATOL, rtol=RTOL):
                return (f"output '{t.name}' differs from the reference by {diff:.3g} "
                        f"(atol {ATOL}, rtol {RTOL})", worst)  # fmt: skip
        elif not np.array_equal(value, expected):
            return (f"output '{t.name}' is {value.ravel()[:8].tolist()}, the reference "
                    f"{np.ravel(expected)[:8].tolist()}", worst)  # fmt: skip
    return "", worst


def state_hint(pipeline: Pipeline, core_inputs: Sequence[CoreTensor],
               core_outputs: Sequence[CoreTensor]) -> str | None:  # fmt: skip
    """A note when no state is declared but a core output has the dtype and dims of a core
    input and a name that goes with it (``stateN`` and ``state``, ``hn`` and ``h``: a
    recurrent model's next state, often), or None."""
    session = pipeline.session
    if session is None or session.states:
        return None
    for out in core_outputs:
        for inp in core_inputs:
            same = (
                out.dtype == inp.dtype
                and len(out.dims) == len(inp.dims)
                and all(-1 in (a, b) or a == b for a, b in zip(out.dims, inp.dims, strict=True))
            )
            a, b = out.name.lower(), inp.name.lower()
            named = a.startswith(b) or b.startswith(a) or ("state" in a and "state" in b)
            if same and named and a != b:  # stateN/state, hn/h, c_out/c_in ...
                return (
                    f"note: {pipeline.name}: the core's output '{out.name}' has the dtype and "
                    f"dims of its input '{inp.name}'; if it is the model's next state, declare "
                    f"[[sequence.state]] input = '{inp.name}', output = '{out.name}' (a step's "
                    "state is computed before the core runs and never sees its outputs)"
                )
    return None
