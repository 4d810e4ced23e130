"""The events of one ``execute`` of a generated session model, as pure logic (no
``triton_python_backend_utils``): :mod:`tritonrepo.pipelines.session_step` is the thin
Python-backend model around it.

The user's step takes one session's state and one event, numpy batch-first (batch 1)::

    step(state, inputs: dict[str, np.ndarray]) -> (state, outputs: dict[str, np.ndarray])

``state`` is None at START and whatever the previous call returned after that (any Python
object, kept in memory by :class:`tritonrepo.step.sessions.SessionStore`). ``outputs`` holds the
core model's inputs and the extra tensors for postprocess. :meth:`SessionEvents.run` calls the
step for each event, the core model once per group of events whose core inputs can be joined
(the same trailing shapes), in chunks of the core's ``max_batch_size``, then the postprocess
function (:func:`~tritonrepo.pipelines.function_calls.call_batch`), and only then commits each
session's new state: a failed event changes no state. END drops the state, failed or not.

State that comes out of the core (:class:`CoreStateSpec`, the description's
``[[sequence.state]]``) is kept beside the step's (:class:`Carried`): each event's core run gets
the session's state inputs (zeros at START) joined with its step outputs, and the state the
session keeps after the event is the core's state outputs of that run. With ``implicit`` the
core model keeps it itself (Triton's implicit state, a TensorRT plan): the core is called once
per event with the session's correlation ID and START/END, and nothing is fed.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from tritonrepo.pipelines.function_calls import (
    OutputSpec,
    as_request_error,
    call_batch,
    check_outputs,
)
from tritonrepo.step.errors import InvalidRequest
from tritonrepo.step.sessions import SessionStore

Tensors = dict[str, np.ndarray]
SequenceFlags = tuple[Hashable, bool, bool]  # a core call's correlation ID, START, END (implicit)
CoreCall = Callable[..., "Tensors | Exception"]  # (feeds, sequence: SequenceFlags | None = None)


@dataclass(frozen=True)
class CoreStateSpec:
    """One state the core returns: the core ``input`` that takes it, the ``output`` that gives
    the next one, its numpy ``dtype`` and ``dims`` (one session's, without the batch dim); the
    initial state is zeros."""

    input: str
    output: str
    dtype: Any
    dims: tuple[int, ...]

    def initial(self) -> np.ndarray:
        """The state at START: zeros ``[1, *dims]``."""
        return np.zeros((1, *self.dims), self.dtype)


@dataclass(frozen=True)
class Carried:
    """What the store keeps for a session whose core returns state: the step's ``step`` state
    and the core's state inputs for the next event (``{input: [1, *dims]}``)."""

    step: Any
    core: Mapping[str, np.ndarray]


def no_step(state: Any, inputs: Tensors) -> tuple[None, Tensors]:
    """The step of a description without one: the request's tensors go to the core."""
    return None, dict(inputs)


@dataclass
class Event:
    """One request: its correlation ID ``key``, START/END, and its input tensors ``[1, ...]``."""

    key: Hashable
    start: bool
    end: bool
    inputs: Tensors


@dataclass
class _Prepared:
    index: int
    event: Event
    state: Any  # the step's new state
    outputs: Tensors
    core_state: Mapping[str, np.ndarray]  # the core's state inputs for this event


class SessionEvents:
    """Runs the events of one execute (module docstring).

    Args:
        step: the user's ``step(state, inputs) -> (state, outputs)`` (None: the request's
            tensors go to the core as they are); ``step_ref`` its name.
        postprocess: ``fn(inputs) -> outputs``, batch-first; ``post_ref`` its name.
        store: the sessions of this instance.
        step_outputs: the step's declared outputs (core inputs and extras) by name.
        core_inputs: the names among ``step_outputs`` that go to the core model.
        post_outputs: the response tensors, as :class:`OutputSpec`.
        core_call: ``(feeds, sequence=None) -> {core output: [n, ...]}`` or an Exception;
            ``feeds`` ``{core input: [n, ...]}``, ``sequence`` (implicit state only) the
            event's ``(correlation ID, START, END)``.
        core_max_batch_size: rows per core call, at most.
        core_states: the states the core returns, fed back per session (module docstring).
        implicit: the core keeps ``core_states`` itself (Triton's implicit state).
    """

    def __init__(
        self, step: Callable | None, step_ref: str, postprocess: Callable, post_ref: str,
        store: SessionStore, step_outputs: Mapping[str, OutputSpec], core_inputs: tuple[str, ...],
        post_outputs: Mapping[str, OutputSpec], core_call: CoreCall, core_max_batch_size: int,
        core_states: tuple[CoreStateSpec, ...] = (), implicit: bool = False,
    ) -> None:  # fmt: skip
        self.step, self.step_ref = step or no_step, step_ref or "the request's tensors"
        self.post, self.post_ref = postprocess, post_ref
        self.store = store
        self.step_outputs, self.core_inputs = step_outputs, core_inputs
        self.post_outputs = post_outputs
        self.core_call, self.core_max_batch_size = core_call, core_max_batch_size
        self.implicit = implicit
        self.fed = () if implicit else core_states  # the states this model feeds
        self.carried = bool(core_states)  # the store keeps Carried

    def run(self, events: list[Event]) -> list[Tensors | Exception]:
        """One result or error per event, in order; never raises. Events of one session in one
        execute (the Oldest strategy sends one at a time) are run one after the other."""
        self.store.evict_idle()
        results: list[Tensors | Exception | None] = [None] * len(events)
        pending = list(range(len(events)))
        while pending:
            wave, later, keys = [], [], set()
            for i in pending:
                (later if events[i].key in keys else wave).append(i)
                keys.add(events[i].key)
            try:
                self._wave([(i, events[i]) for i in wave], results)
            except Exception as exc:  # a bug here must not fail the execute
                for i in wave:
                    if results[i] is None:
                        results[i] = RuntimeError(f"internal error: {exc!r}")
            pending = later
        return results  # type: ignore[return-value]

    def _prepare(self, index: int, event: Event) -> _Prepared:
        """The step on one event. Raises: InvalidRequest or RuntimeError (the event's error)."""
        for name, value in event.inputs.items():
            if value.ndim == 0 or value.shape[0] != 1:
                raise InvalidRequest(
                    f"input '{name}' has batch {value.shape[:1]}: one event per request "
                    "(batch 1); send the events of a session one after the other"
                )
        stored = self.store.state(event.key, event.start)
        state, core_state = stored, {}
        if self.carried:
            state = stored.step if stored is not None else None
            core_state = (dict(stored.core) if stored is not None
                          else {s.input: s.initial() for s in self.fed})  # fmt: skip
        try:
            result = self.step(state, dict(event.inputs))
        except Exception as exc:
            raise as_request_error(exc, self.step_ref) from exc
        if not isinstance(result, tuple) or len(result) != 2:
            raise RuntimeError(
                f"{self.step_ref} returned a {type(result).__name__}; it must return the pair "
                "(state, outputs)"
            )
        new_state, outputs = result
        checked = check_outputs(outputs, 1, self.step_outputs, self.step_ref)
        return _Prepared(index, event, new_state, checked, core_state)

    def _next_core_state(self, p: _Prepared, out: Tensors) -> Mapping[str, np.ndarray]:
        """The session's core state after ``p``'s event: the core's state outputs of its run.
        Raises: RuntimeError when one is missing or not ``[1, *dims]`` of its dtype."""
        state = {}
        for s in self.fed:
            value = out.get(s.output)
            if value is None or value.shape != (1, *s.dims) or value.dtype != s.dtype:
                got = "missing" if value is None else f"{value.dtype} {list(value.shape)}"
                raise RuntimeError(f"the core model's state output '{s.output}' is {got}, "
                                   f"declared {np.dtype(s.dtype)} {[1, *s.dims]}")  # fmt: skip
            state[s.input] = value
        return state

    def _wave(self, wave: list[tuple[int, Event]], results: list) -> None:
        ready: list[_Prepared] = []
        for i, event in wave:
            try:
                ready.append(self._prepare(i, event))
            except Exception as exc:
                results[i] = exc
                if event.end:
                    self.store.end(event.key)
        core_out = self._core(ready)
        served = []
        for p in ready:
            out = core_out[p.index]
            if not isinstance(out, Exception) and self.carried:
                try:
                    p.core_state = self._next_core_state(p, out)
                except RuntimeError as exc:
                    out = exc
            if isinstance(out, Exception):
                results[p.index] = out
            else:
                extras = {k: v for k, v in p.outputs.items() if k not in self.core_inputs}
                served.append((p, {**out, **extras}))
        posted = call_batch(self.post, [x for _, x in served], self.post_outputs, self.post_ref)
        for (p, _), result in zip(served, posted, strict=True):
            results[p.index] = result
            if not isinstance(result, Exception):
                state = Carried(p.state, p.core_state) if self.carried else p.state
                self.store.commit(p.event.key, state)
        for p in ready:
            if p.event.end:
                self.store.end(p.event.key)

    def _core(self, ready: list[_Prepared]) -> dict[int, Tensors | Exception]:
        """The core model's outputs per event index: one call per group of joinable events
        (same trailing shapes), at most ``core_max_batch_size`` rows each."""
        groups: dict[tuple, list[_Prepared]] = {}
        for p in ready:
            shapes = tuple(p.outputs[n].shape[1:] for n in self.core_inputs)
            # implicit state: one call per event, with its sequence (Triton batches them)
            key = (p.index,) if self.implicit else shapes
            groups.setdefault(key, []).append(p)
        out: dict[int, Tensors | Exception] = {}
        for members in groups.values():
            for begin in range(0, len(members), self.core_max_batch_size):
                chunk = members[begin : begin + self.core_max_batch_size]
                feeds = {n: np.concatenate([p.outputs[n] for p in chunk]) for n in self.core_inputs}
                for s in self.fed:
                    feeds[s.input] = np.concatenate([p.core_state[s.input] for p in chunk])
                try:
                    if self.implicit:
                        event = chunk[0].event
                        got = self.core_call(feeds, (event.key, event.start, event.end))
                    else:
                        got = self.core_call(feeds)
                except Exception as exc:
                    got = RuntimeError(f"core model call failed: {exc!r}")
                for row, p in enumerate(chunk):
                    if isinstance(got, Exception):
                        out[p.index] = got
                    else:
                        out[p.index] = {
                            k: (v.reshape(-1, 1) if v.ndim == 1 else v)[row : row + 1]
                            for k, v in got.items()
                        }
        return out
