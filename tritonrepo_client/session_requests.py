"""Session events as users write them (JSON lines ``{"item_id": N, "candidates": [N, ...]}``)
and the order a replay sends them in, without I/O: shared by the thread and asyncio session
clients and the command line."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TextIO

import numpy as np

from tritonrepo_client.ranking_requests import is_id as _is_id


@dataclass(frozen=True)
class ReplayStep:
    """One event of a replay: send ``item_id`` / ``candidates`` with END when ``end``; after
    its answer is yielded, raise ``ValueError(stop)`` when ``stop`` is set (the next event
    was invalid, so this one ended the session)."""

    event: dict
    item_id: int
    candidates: list[int]
    end: bool
    stop: ValueError | None = None


def replay_plan(events: Iterable[dict]) -> Iterator[ReplayStep]:
    """The steps of replaying ``events`` as one session: each event is checked
    (:func:`check_event`) before the one ahead of it is sent, so the last valid event carries
    END and no session is left open when event k is invalid or ``events`` raises ValueError
    while producing it.

    Raises:
        ValueError: the first event is invalid (nothing is to be sent).
    """
    items = iter(events)
    first = next(items, None)
    if first is None:
        return
    current: tuple[dict, int, list[int]] | None = (first, *check_event(first, "event 1"))
    number = 1
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
        yield ReplayStep(event, item_id, candidates, following is None, stop)
        current, number = following, number + 1


def stopped(step: ReplayStep) -> ValueError:
    """The error a replay raises after ``step`` (whose ``stop`` is set) was answered."""
    return ValueError(f"{step.stop} (the session was ended with the event before it)")


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
