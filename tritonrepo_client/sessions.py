"""Sessions on the ``ctr_session`` sequence model: :class:`SessionClient` / :class:`Session`
(threads) and :class:`AsyncSessionClient` / :class:`AsyncSession` (asyncio). Events are built
and answers read by :mod:`tritonrepo_client.ranking_requests`; replays are planned by
:mod:`tritonrepo_client.session_requests`."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Awaitable, Hashable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from tritonrepo_client.async_connection import AsyncModelClient, AsyncTritonConnection
from tritonrepo_client.connection import ModelClient, TritonConnection
from tritonrepo_client.errors import ClientError
from tritonrepo_client.ranking_requests import OUTPUTS, Ranking, event_request, item_ids, ranking
from tritonrepo_client.session_requests import replay_plan, stopped
from tritonrepo_client.validation import check_correlation_id


class SessionEvents:
    """What the thread and asyncio sessions share: one event's inputs and sequence flags, and
    the bookkeeping once it is answered. Subclasses set ``correlation_id``, ``started`` and
    ``ended``."""

    correlation_id: Hashable
    started: bool
    ended: bool

    def _event(
        self,
        item_id: int,
        candidates: Sequence[int] | np.ndarray,
        end: bool,
        timeout_s: float | None,
    ) -> tuple[dict[str, np.ndarray], dict]:
        """``(inputs, infer options)`` of one event (:func:`ranking_requests.event_request`).

        Raises:
            RuntimeError: the session has ended.
            ValueError: ids are not integers.
        """
        return event_request(
            self.correlation_id, self.started, self.ended, item_id, candidates, end, timeout_s
        )

    def _answered(self, out: dict[str, np.ndarray], end: bool) -> Ranking:
        self.started = True
        self.ended = end
        return ranking(out)


class Session(SessionEvents):
    """One user session on ``ctr_session``; created by :meth:`SessionClient.session`.

    The first :meth:`send` carries START; pass ``end=True`` with the last event (Triton ends a
    sequence only with a request). A session unused for the model's idle timeout (10 min) is
    dropped by the server; the next :meth:`send` then fails.

    Events reach the server in the order :meth:`send` was called, even from several threads
    that do not wait for each other: each call takes a ticket and waits for the previous
    event's answer before it is sent (one event of a correlation ID in flight at a time, as a
    sequence needs); :meth:`submit` does the same without blocking the caller (the sessions of
    one client share its worker threads). Events are never retried: the server may have
    recorded a lost answer's event already.
    """

    def __init__(
        self,
        connection: TritonConnection,
        model: str,
        correlation_id: Hashable,
        executor: ThreadPoolExecutor | None = None,
    ):
        self.connection = connection
        self._executor = executor or ThreadPoolExecutor(1)
        self.model = model
        self.correlation_id = correlation_id
        self.started = False
        self.ended = False
        self._turn = threading.Condition()
        self._tickets = 0  # tickets handed out
        self._serving = 0  # ticket whose event may be sent now

    def send(
        self,
        item_id: int,
        candidates: Sequence[int] | np.ndarray,
        end: bool = False,
        timeout_s: float | None = None,
    ) -> Ranking:
        """Record the event ``item_id`` and rank ``candidates`` (all of them, descending).

        Args:
            timeout_s: deadline of this event's call, seconds (default: the client's), not
                counting the wait for earlier events of this session.

        Raises:
            RuntimeError: the session has ended.
            ClientError: the server rejected the event (its message says why); the session's
                state is unchanged by a rejected event.
        """
        return self._in_turn(self._ticket(), item_id, candidates, end, timeout_s)

    def submit(
        self,
        item_id: int,
        candidates: Sequence[int] | np.ndarray,
        end: bool = False,
        timeout_s: float | None = None,
    ) -> Future[Ranking]:
        """:meth:`send` without waiting: the event takes its place in the session now and is
        sent after the earlier ones; the future gives its :class:`Ranking` or exception."""
        ticket = self._ticket()
        return self._executor.submit(self._in_turn, ticket, item_id, candidates, end, timeout_s)

    def _ticket(self) -> int:
        with self._turn:
            self._tickets += 1
            return self._tickets - 1

    def _in_turn(
        self,
        ticket: int,
        item_id: int,
        candidates: Sequence[int] | np.ndarray,
        end: bool,
        timeout_s: float | None,
    ) -> Ranking:
        with self._turn:
            while self._serving != ticket:
                self._turn.wait()
        try:
            return self._send(item_id, candidates, end, timeout_s)
        finally:
            with self._turn:
                self._serving += 1
                self._turn.notify_all()

    def _send(
        self,
        item_id: int,
        candidates: Sequence[int] | np.ndarray,
        end: bool,
        timeout_s: float | None,
    ) -> Ranking:
        inputs, options = self._event(item_id, candidates, end, timeout_s)
        return self._answered(self.connection.infer(self.model, inputs, OUTPUTS, **options), end)


class SessionClient(ModelClient):
    """Sessions on the ``ctr_session`` sequence model (arguments: :class:`ModelClient`;
    ``model`` defaults to ``ctr_session``)."""

    DEFAULT_MODEL = "ctr_session"
    # Worker threads behind Session.submit, shared by the client's sessions (FIFO, so an
    # event's predecessors were always picked up before it: no deadlock).
    SUBMIT_THREADS = 16
    _executor: ThreadPoolExecutor | None = None

    def _workers(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self.SUBMIT_THREADS, "tritonrepo-session")
        return self._executor

    def close(self) -> None:
        """Wait for submitted events, then close the connection."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        super().close()

    def session(self, correlation_id: int | str) -> Session:
        """A new session; ``correlation_id``: an int in 1..2**64-1 (1..2**63-1 over gRPC) or a
        str of 1..128 bytes (UTF-8), unique among the sessions open on the server.

        Raises:
            InvalidCorrelationId: (a ValueError) any other ID; nothing is sent.
        """
        return Session(
            self.connection,
            self.model,
            check_correlation_id(correlation_id, protocol=self.connection.protocol),
            self._workers(),
        )

    def replay(
        self, correlation_id: int | str, events: Iterable[dict]
    ) -> Iterator[tuple[dict, Ranking]]:
        """Send ``events`` (``{"item_id": int, "candidates": [int, ...]}``) as one session,
        START with the first and END with the last; yields each event with its ranking.

        No session is left open on the server when the replay stops early: each event is
        checked (:func:`check_event`) before the one ahead of it is sent, so when event k is
        invalid, or ``events`` itself raises ValueError while producing it (e.g. a bad line of
        a stream), event k-1 is sent with END and the error is raised after it is yielded;
        when the server rejects an event, the last event it accepted is sent again with END
        (its answer is dropped) and the error is raised.

        Raises:
            ValueError: an event is not ``{"item_id": int, "candidates": [int, ...]}`` (the
                message names the event and the field); nothing is sent when it is the first.
            ClientError: the server rejected an event (the replay stops there).
        """
        session = self.session(correlation_id)
        sent: tuple[int, list[int]] | None = None  # the last event the server accepted
        for step in replay_plan(events):
            try:
                answer = session.send(step.item_id, step.candidates, end=step.end)
            except ClientError:
                if sent is not None and not session.ended:
                    with contextlib.suppress(ClientError):
                        session.send(*sent, end=True)  # end the open session on the server
                raise
            sent = (step.item_id, step.candidates)
            yield step.event, answer
            if step.stop is not None:
                raise stopped(step)


class AsyncSession(SessionEvents):
    """One session on ``ctr_session`` for asyncio; made by :meth:`AsyncSessionClient.session`.

    :meth:`send` takes the event's place in the session when it is CALLED, not when it is
    awaited: ``await asyncio.gather(s.send(1, c), s.send(2, c), s.send(3, c, end=True))``
    sends 1, 2, 3 in that order, each after the previous answer (one event of a correlation
    ID in flight at a time). Events are never retried.
    """

    def __init__(self, connection: AsyncTritonConnection, model: str, correlation_id: int | str):
        self.connection = connection
        self.model = model
        self.correlation_id = correlation_id
        self.started = False
        self.ended = False
        self._previous: asyncio.Future | None = None

    def send(
        self,
        item_id: int,
        candidates: Sequence[int] | np.ndarray,
        end: bool = False,
        timeout_s: float | None = None,
    ) -> Awaitable[Ranking]:
        """Queue the event ``item_id`` and return an awaitable of its :class:`Ranking` (all
        candidates, descending). Call it from the event loop's thread.

        Raises (when awaited):
            RuntimeError: the session had ended.
            ClientError: the server rejected the event; later events are still sent.
        """
        previous = self._previous
        done: asyncio.Future = asyncio.get_running_loop().create_future()
        self._previous = done
        ids = item_ids(candidates, "candidates")

        async def run() -> Ranking:
            try:
                if previous is not None:
                    await asyncio.shield(previous)
                return await self._send(item_id, ids, end, timeout_s)
            finally:
                done.set_result(None)

        return asyncio.ensure_future(run())

    def submit(
        self,
        item_id: int,
        candidates: Sequence[int] | np.ndarray,
        end: bool = False,
        timeout_s: float | None = None,
    ) -> Awaitable[Ranking]:
        """:meth:`send` (which already returns without waiting), named as
        :meth:`Session.submit` for code written against the thread-based session."""
        return self.send(item_id, candidates, end, timeout_s)

    async def _send(
        self, item_id: int, candidates: np.ndarray, end: bool, timeout_s: float | None
    ) -> Ranking:
        inputs, options = self._event(item_id, candidates, end, timeout_s)
        out = await self.connection.infer(self.model, inputs, OUTPUTS, **options)
        return self._answered(out, end)


class AsyncSessionClient(AsyncModelClient):
    """:class:`SessionClient` for asyncio."""

    DEFAULT_MODEL = "ctr_session"

    def session(self, correlation_id: int | str) -> AsyncSession:
        """A new session (correlation ID rules of :meth:`SessionClient.session`).

        Raises:
            InvalidCorrelationId: (a ValueError) the ID cannot be sent; nothing is sent.
        """
        checked = check_correlation_id(correlation_id, protocol=self.connection.protocol)
        return AsyncSession(self.connection, self.model, checked)

    async def replay(
        self, correlation_id: int | str, events: Iterable[dict]
    ) -> AsyncIterator[tuple[dict, Ranking]]:
        """:meth:`SessionClient.replay` for asyncio (``async for``): the same order, the
        same END on an early stop, the same errors."""
        session = self.session(correlation_id)
        sent: tuple[int, list[int]] | None = None  # the last event the server accepted
        for step in replay_plan(events):
            try:
                answer = await session.send(step.item_id, step.candidates, end=step.end)
            except ClientError:
                if sent is not None and not session.ended:
                    with contextlib.suppress(ClientError):
                        await session.send(*sent, end=True)  # end the open session
                raise
            sent = (step.item_id, step.candidates)
            yield step.event, answer
            if step.stop is not None:
                raise stopped(step)


__all__ = ["AsyncSession", "AsyncSessionClient", "Session", "SessionClient", "SessionEvents"]
