"""Per-sequence state of a Python-backend model with ``sequence_batching``, keyed by correlation
ID, and the sequence controls of a request.

The Python backend does not carry Triton's implicit state (``sequence_batching.state``: the
backend never calls ``TRITONBACKEND_StateUpdate``), so a stateful Python model keeps each
sequence's state in memory itself. The Oldest and Direct strategies route every request of a
sequence to the same model instance, so one :class:`SessionStore` per instance is enough.
``ctr_session`` (:mod:`tritonrepo.ctr.sessions`) and the generated session models of described
pipelines (:mod:`tritonrepo.pipelines.session_step`) both keep their state here.

Lifecycle: START creates (or resets) a session; END drops it after answering; a session idle for
longer than ``idle_timeout_s`` is evicted (Triton gives a backend no callback when it drops a
sequence for idleness, so the store drops it itself); at most ``max_sessions`` are kept: beyond
that, ``when_full = "evict"`` evicts the least recently used and ``"refuse"`` refuses the new
session (:class:`SessionsFull`). A request whose state is missing (never started, already
ended, evicted) raises :class:`UnknownSession`: it is never silently given a fresh state.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from tritonrepo.step.errors import InvalidRequest

WHEN_FULL = ("evict", "refuse")


class UnknownSession(InvalidRequest):
    """The request continues a sequence whose state does not exist (any more)."""


class SessionsFull(InvalidRequest):
    """A new session was refused: the store holds ``max_sessions`` sessions."""


class SessionStore:
    """Any state object by correlation ID (int or str, as the client sent it).

    Args:
        idle_timeout_s: seconds without a request after which a session is evicted.
        max_sessions: bound on the sessions kept.
        clock: monotonic seconds (injectable for tests).
        when_full: ``"evict"`` the least recently used session, or ``"refuse"`` new ones.

    Raises:
        ValueError: a bound is not > 0, or ``when_full`` is not one of :data:`WHEN_FULL`.
    """

    def __init__(
        self,
        idle_timeout_s: float,
        max_sessions: int,
        clock: Callable[[], float] = time.monotonic,
        when_full: str = "evict",
    ) -> None:
        if idle_timeout_s <= 0 or max_sessions <= 0:
            raise ValueError("idle_timeout_s and max_sessions must be > 0")
        if when_full not in WHEN_FULL:
            raise ValueError(f"when_full must be one of {WHEN_FULL}, got {when_full!r}")
        self.idle_timeout_s = idle_timeout_s
        self.max_sessions = max_sessions
        self.clock = clock
        self.when_full = when_full
        self._states: OrderedDict[Hashable, tuple[Any, float]] = OrderedDict()
        self.evicted_idle = 0
        self.evicted_full = 0

    def __len__(self) -> int:
        return len(self._states)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._states

    def state(self, key: Hashable, start: bool) -> Any:
        """``key``'s state, or None for a request that carries START (the session begins).

        Raises:
            UnknownSession: not ``start`` and no state for ``key``.
            SessionsFull: ``start`` for a new key while the store is full and refuses.
        """
        if start:
            full = len(self._states) >= self.max_sessions and key not in self._states
            if full and self.when_full == "refuse":
                raise SessionsFull(
                    f"sequence {key!r} not started: this instance holds {self.max_sessions} "
                    "sessions (max_sessions); end finished sessions (sequence_end), retry "
                    "later, or raise max_sessions"
                )
            return None
        if key in self._states:
            return self._states[key][0]
        raise UnknownSession(
            f"sequence {key!r} has no state: it was never started, has ended, or was evicted "
            f"(idle over {self.idle_timeout_s:g} s or over {self.max_sessions} sessions); "
            "start it again with sequence_start"
        )

    def commit(self, key: Hashable, state: Any) -> None:
        """Store ``state`` as ``key``'s (most recently used); with ``when_full = "evict"``,
        evict the least recently used beyond the bound."""
        self._states[key] = (state, self.clock())
        self._states.move_to_end(key)
        while len(self._states) > self.max_sessions:
            self._states.popitem(last=False)
            self.evicted_full += 1

    def end(self, key: Hashable) -> None:
        """Drop ``key``'s state (no error if there is none)."""
        self._states.pop(key, None)

    def evict_idle(self) -> int:
        """Drop sessions idle for longer than ``idle_timeout_s``; returns how many."""
        deadline = self.clock() - self.idle_timeout_s
        evicted = 0
        while self._states:
            key, (_, last_used) = next(iter(self._states.items()))
            if last_used > deadline:
                break
            del self._states[key]
            evicted += 1
        self.evicted_idle += evicted
        return evicted


@dataclass(frozen=True)
class SequenceControls:
    """A request's place in its sequence: its correlation ID (int or str, as sent) and whether
    it carries START and END (both: a one-request sequence)."""

    key: Hashable
    start: bool
    end: bool


def read_controls(pb_utils: Any, request: Any, start: str = "START", end: str = "END"):
    """The :class:`SequenceControls` of ``request``, from its ``start``/``end`` control input
    tensors (``control_input`` of the config; INT32/BOOL ``[1]``, or ``[1, 1]`` with batching)
    or, when the config declares none, from the request's flags (bit tests: a START|END request
    has both)."""
    flags = None
    values = []
    for name, bit in ((start, "START"), (end, "END")):
        tensor = pb_utils.get_input_tensor_by_name(request, name)
        if tensor is not None:
            values.append(bool(tensor.as_numpy().reshape(-1)[0]))
            continue
        if flags is None:
            flags = int(request.flags())
        mask = getattr(pb_utils, f"TRITONSERVER_REQUEST_FLAG_SEQUENCE_{bit}", 0)
        values.append(bool(flags & mask))
    return SequenceControls(request.correlation_id(), values[0], values[1])
