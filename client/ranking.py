"""Clients of the CTR models: ``ctr_ranking`` (stateless) and ``ctr_session`` (sequences)."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Hashable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TextIO

import numpy as np

from tritonrepo_client.connection import ClientError, ModelClient, TritonConnection
from tritonrepo_client.validation import check_correlation_id


@dataclass(frozen=True)
class Ranking:
    """Ranked candidates: ``item_ids`` INT64 ``[k]`` and their CTR ``scores`` FP32 ``[k]``,
    descending."""

    item_ids: np.ndarray
    scores: np.ndarray

    def as_dict(self) -> dict[str, list]:
        """JSON-ready ``{"item_ids": [...], "scores": [...]}``."""
        return {
            "item_ids": [int(i) for i in self.item_ids],
            "scores": [round(float(s), 6) for s in self.scores],
        }


def _ids(values: Sequence[int] | np.ndarray, name: str) -> np.ndarray:
    array = np.asarray(values)
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"{name} must be integer item ids, got dtype {array.dtype}")
    return array.astype(np.int64).reshape(-1)


class RankingClient(ModelClient):
    """Top-K candidates for a user from the ``ctr_ranking`` ensemble (arguments:
    :class:`ModelClient`; ``model`` defaults to ``ctr_ranking``)."""

    DEFAULT_MODEL = "ctr_ranking"

    def rank(
        self,
        history: Sequence[int] | np.ndarray,
        candidates: Sequence[int] | np.ndarray,
        top_k: int | None = None,
        timeout_s: float | None = None,
        priority: int | None = None,
        timeout_us: int | None = None,
    ) -> Ranking:
        """Rank ``candidates`` (1..512 ids) for a user with ``history`` (ids, newest last).

        ``top_k`` defaults to the server's (10); it is cut to ``len(candidates)``.
        ``timeout_s``: this call's deadline, seconds (default: the client's). ``priority``: 1
        realtime, 2 bulk (default: the client's); ``timeout_us``: Triton's queue timeout in µs
        when it should differ from the deadline (:mod:`tritonrepo_client.scheduling`).

        Raises:
            ValueError: ids are not integers.
            ServerUnreachable: no server at the URL.
            ClientError: the server rejected the request (e.g. no or > 512 candidates,
                ``top_k`` ≤ 0), with Triton's message.
        """
        inputs = {
            "HISTORY": _ids(history, "history"),
            "CANDIDATES": _ids(candidates, "candidates"),
        }
        if top_k is not None:
            inputs["TOP_K"] = np.array([top_k], dtype=np.int32)
        out = self.connection.infer(
            self.model,
            inputs,
            ["ITEM_IDS", "SCORES"],
            timeout_s=timeout_s,
            priority=self.priority if priority is None else priority,
            timeout_us=self.timeout_us if timeout_us is None else timeout_us,
        )
        return Ranking(out["ITEM_IDS"], out["SCORES"])


OUTPUTS = ["ITEM_IDS", "SCORES"]


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
        """``(inputs, infer options)`` of one event: ``ITEM_ID`` INT64 ``[1]``,
        ``CANDIDATES`` INT64 ``[n]``; START on the first, END when ``end``, never retried.

        Raises:
            RuntimeError: the session has ended.
            ValueError: ids are not integers.
        """
        if self.ended:
            raise RuntimeError(f"session {self.correlation_id!r} has ended")
        if not _is_id(item_id):
            raise ValueError(
                f"item_id must be an integer item id, got {item_id!r} ({type(item_id).__name__})"
            )
        inputs = {
            "ITEM_ID": np.array([item_id], dtype=np.int64),
            "CANDIDATES": _ids(candidates, "candidates"),
        }
        options = {
            "timeout_s": timeout_s,
            "retry": False,
            "sequence_id": self.correlation_id,
            "sequence_start": not self.started,
            "sequence_end": end,
        }
        return inputs, options

    def _answered(self, out: dict[str, np.ndarray], end: bool) -> Ranking:
        self.started = True
        self.ended = end
        return Ranking(out["ITEM_IDS"], out["SCORES"])


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
        items = iter(events)
        first = next(items, None)
        if first is None:
            return
        current: tuple[dict, int, list[int]] | None = (first, *check_event(first, "event 1"))
        number = 1
        sent: tuple[int, list[int]] | None = None  # the last event the server accepted
        while current is not None:
            event, item_id, candidates = current
            stop: ValueError | None = None
            try:
                ahead = next(items, None)
                following = (
                    None if ahead is None else (ahead, *check_event(ahead, f"event {number + 1}"))
                )
            except ValueError as exc:
                stop, following = exc, None
            try:
                ranking = session.send(item_id, candidates, end=following is None)
            except ClientError:
                if sent is not None and not session.ended:
                    with contextlib.suppress(ClientError):
                        session.send(*sent, end=True)  # end the open session on the server
                raise
            sent = (item_id, candidates)
            yield event, ranking
            if stop is not None:
                raise ValueError(f"{stop} (the session was ended with the event before it)")
            current, number = following, number + 1


def check_event(event: object, where: str = "event") -> tuple[int, list[int]]:
    """``(item_id, candidates)`` of one session event ``{"item_id": int, "candidates":
    [int, ...]}``; ``where`` names it in errors (e.g. ``"line 3"``).

    Raises:
        ValueError: not a JSON object, a missing field, or a field that is not an integer id
            (a list of them for ``candidates``); the message names ``where`` and the field.
    """
    if not isinstance(event, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(event).__name__}")
    for field in ("item_id", "candidates"):
        if field not in event:
            raise ValueError(
                f"{where}: missing field '{field}' (an event is "
                '{"item_id": N, "candidates": [N, ...]})'
            )
    item_id = event["item_id"]
    if not _is_id(item_id):
        raise ValueError(
            f"{where}: field 'item_id' must be an integer item id, got {item_id!r} "
            f"({type(item_id).__name__})"
        )
    candidates = event["candidates"]
    if not isinstance(candidates, list | tuple | np.ndarray):
        raise ValueError(
            f"{where}: field 'candidates' must be a list of integer item ids, got "
            f"{candidates!r:.60} ({type(candidates).__name__})"
        )
    for i, candidate in enumerate(candidates):
        if not _is_id(candidate):
            raise ValueError(
                f"{where}: field 'candidates' item {i} must be an integer item id, got "
                f"{candidate!r} ({type(candidate).__name__})"
            )
    return int(item_id), [int(c) for c in candidates]


def _is_id(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def read_events(stream: TextIO) -> Iterator[dict]:
    """Session events from JSON lines (blank lines and ``#`` comments skipped).

    Raises:
        ValueError: a line is not a JSON object (the message gives its number).
    """
    for _number, event in read_numbered_events(stream):
        yield event


def read_checked_events(stream: TextIO) -> Iterator[dict]:
    """:func:`read_events`, each event checked (:func:`check_event`) as it is read.

    Raises:
        ValueError: a line is not a valid event (the message gives its number and field).
    """
    for number, event in read_numbered_events(stream):
        check_event(event, f"line {number}")
        yield event


def read_numbered_events(stream: TextIO) -> Iterator[tuple[int, dict]]:
    """``(line number, event)`` from JSON lines (blank lines and ``#`` comments skipped).

    Raises:
        ValueError: a line is not a JSON object (the message gives its number).
    """
    for number, line in enumerate(stream, start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        try:
            event = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"line {number}: not JSON ({exc.msg})") from None
        if not isinstance(event, dict):
            raise ValueError(f"line {number}: expected a JSON object")
        yield number, event
