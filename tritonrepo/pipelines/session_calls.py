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
CoreCall = Callable[[Tensors], "Tensors | Exception"]


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
    state: Any
    outputs: Tensors


class SessionEvents:
    """Runs the events of one execute (module docstring).

    Args:
        step: the user's ``step(state, inputs) -> (state, outputs)``; ``step_ref`` its name.
        postprocess: ``fn(inputs) -> outputs``, batch-first; ``post_ref`` its name.
        store: the sessions of this instance.
        step_outputs: the step's declared outputs (core inputs and extras) by name.
        core_inputs: the names among ``step_outputs`` that go to the core model.
        post_outputs: the response tensors, as :class:`OutputSpec`.
        core_call: ``{core input: [n, ...]} -> {core output: [n, ...]}`` or an Exception.
        core_max_batch_size: rows per core call, at most.
    """

    def __init__(
        self, step: Callable, step_ref: str, postprocess: Callable, post_ref: str,
        store: SessionStore, step_outputs: Mapping[str, OutputSpec], core_inputs: tuple[str, ...],
        post_outputs: Mapping[str, OutputSpec], core_call: CoreCall, core_max_batch_size: int,
    ) -> None:  # fmt: skip
        self.step, self.step_ref = step, step_ref
        self.post, self.post_ref = postprocess, post_ref
        self.store = store
        self.step_outputs, self.core_inputs = step_outputs, core_inputs
        self.post_outputs = post_outputs
        self.core_call, self.core_max_batch_size = core_call, core_max_batch_size

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
        state = self.store.state(event.key, event.start)
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
        return _Prepared(index, event, new_state, check_outputs(outputs, 1, self.step_outputs,
                                                         self.step_ref))  # fmt: skip

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
            if isinstance(out, Exception):
                results[p.index] = out
            else:
                extras = {k: v for k, v in p.outputs.items() if k not in self.core_inputs}
                served.append((p, {**out, **extras}))
        posted = call_batch(self.post, [x for _, x in served], self.post_outputs, self.post_ref)
        for (p, _), result in zip(served, posted, strict=True):
            results[p.index] = result
            if not isinstance(result, Exception):
                self.store.commit(p.event.key, p.state)
        for p in ready:
            if p.event.end:
                self.store.end(p.event.key)

    def _core(self, ready: list[_Prepared]) -> dict[int, Tensors | Exception]:
        """The core model's outputs per event index: one call per group of joinable events
        (same trailing shapes), at most ``core_max_batch_size`` rows each."""
        groups: dict[tuple, list[_Prepared]] = {}
        for p in ready:
            shapes = tuple(p.outputs[n].shape[1:] for n in self.core_inputs)
            groups.setdefault(shapes, []).append(p)
        out: dict[int, Tensors | Exception] = {}
        for members in groups.values():
            for begin in range(0, len(members), self.core_max_batch_size):
                chunk = members[begin : begin + self.core_max_batch_size]
                feeds = {n: np.concatenate([p.outputs[n] for p in chunk]) for n in self.core_inputs}
                try:
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
