"""Per-sequence state of ``ctr_session`` on CPU: the rolling 63-item history of each session.

The Python backend does not carry Triton's implicit state (``sequence_batching.state``; the
backend never calls ``TRITONBACKEND_StateUpdate``, see ``../shared/reference/triton-facts.md``
(a)), so the CPU runtime keeps it here, keyed by correlation ID (int or str, as the client sent
it). The sequence batcher routes every request of a sequence to the same model instance, so one
store per instance is enough.

Lifecycle: a START request creates (or resets) the state; END drops it after answering; a
session idle for longer than ``idle_timeout_s`` is evicted (Triton has dropped it by then too);
at most ``max_sessions`` are kept, evicting the least recently used. A request whose state is
missing — never started, already ended, evicted — raises :class:`UnknownSession`: it is never
silently given a fresh history.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Hashable

import numpy as np

from tritonrepo.ctr import spec
from tritonrepo.ctr.features import to_vocabulary
from tritonrepo.step.errors import InvalidRequest


class UnknownSession(InvalidRequest):
    """The request continues a sequence whose state does not exist (any more)."""


class SessionStore:
    """Rolling history windows (INT64 ``[63]``) by correlation ID.

    Args:
        idle_timeout_s: seconds without a request after which a session is evicted.
        max_sessions: bound on sessions kept (each holds 63 × 8 bytes plus bookkeeping); the
            least recently used one is evicted beyond it.
        clock: monotonic seconds (injectable for tests).
    """

    def __init__(
        self,
        idle_timeout_s: float,
        max_sessions: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if idle_timeout_s <= 0 or max_sessions <= 0:
            raise ValueError("idle_timeout_s and max_sessions must be > 0")
        self.idle_timeout_s = idle_timeout_s
        self.max_sessions = max_sessions
        self.clock = clock
        self._windows: OrderedDict[Hashable, tuple[np.ndarray, float]] = OrderedDict()
        self.evicted_idle = 0
        self.evicted_full = 0

    def __len__(self) -> int:
        return len(self._windows)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._windows

    def next_window(self, key: Hashable, item_id: int, start: bool) -> np.ndarray:
        """The window after appending ``item_id`` to ``key``'s history, without storing it.

        Args:
            key: the correlation ID.
            item_id: the event's item (mapped to the vocabulary like ``ctr_preprocess`` does).
            start: the request carries START: begin from an empty history.

        Returns:
            INT64 ``[63]``, newest last, left-padded with ``spec.PAD_ID``.

        Raises:
            UnknownSession: not ``start`` and no state for ``key``.
        """
        if start:
            window = np.full(spec.HISTORY_LENGTH, spec.PAD_ID, dtype=np.int64)
        elif key in self._windows:
            window = self._windows[key][0]
        else:
            raise UnknownSession(
                f"sequence {key!r} has no state: it was never started, has ended, or was "
                f"evicted (idle over {self.idle_timeout_s:g} s or over {self.max_sessions} "
                "sessions); start it again with sequence_start"
            )
        return np.append(window[1:], to_vocabulary(np.int64(item_id)))

    def commit(self, key: Hashable, window: np.ndarray) -> None:
        """Store ``window`` as ``key``'s state (most recently used), evicting beyond the bound."""
        self._windows[key] = (window, self.clock())
        self._windows.move_to_end(key)
        while len(self._windows) > self.max_sessions:
            self._windows.popitem(last=False)
            self.evicted_full += 1

    def end(self, key: Hashable) -> None:
        """Drop ``key``'s state (no error if there is none)."""
        self._windows.pop(key, None)

    def evict_idle(self) -> int:
        """Drop sessions idle for longer than ``idle_timeout_s``; returns how many."""
        deadline = self.clock() - self.idle_timeout_s
        evicted = 0
        while self._windows:
            key, (_, last_used) = next(iter(self._windows.items()))
            if last_used > deadline:
                break
            del self._windows[key]
            evicted += 1
        self.evicted_idle += evicted
        return evicted
