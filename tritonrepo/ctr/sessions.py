"""Per-sequence state of ``ctr_session`` on CPU: the rolling 63-item history of each session.

The Python backend does not carry Triton's implicit state (``sequence_batching.state``; the
backend never calls ``TRITONBACKEND_StateUpdate``, see ``../shared/reference/triton-facts.md``
(a)), so the CPU runtime keeps it in a :class:`tritonrepo.step.sessions.SessionStore`, keyed by
correlation ID (int or str, as the client sent it): the store shared with the generated session
models of described pipelines. The sequence batcher routes every request of a sequence to the
same model instance, so one store per instance is enough.

Lifecycle: a START request creates (or resets) the state; END drops it after answering; a
session idle for longer than ``idle_timeout_s`` is evicted (Triton has dropped it by then too);
at most ``max_sessions`` are kept, evicting the least recently used. A request whose state is
missing — never started, already ended, evicted — raises :class:`UnknownSession`: it is never
silently given a fresh history.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable

import numpy as np

from tritonrepo.ctr import spec
from tritonrepo.ctr.features import to_vocabulary
from tritonrepo.step import sessions
from tritonrepo.step.sessions import UnknownSession

__all__ = ["SessionStore", "UnknownSession"]


class SessionStore(sessions.SessionStore):
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
        super().__init__(idle_timeout_s, max_sessions, clock, when_full="evict")

    @property
    def _windows(self):
        """The windows by correlation ID (the store's own mapping)."""
        return self._states

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
        window = self.state(key, start)
        if window is None:
            window = np.full(spec.HISTORY_LENGTH, spec.PAD_ID, dtype=np.int64)
        return np.append(window[1:], to_vocabulary(np.int64(item_id)))
