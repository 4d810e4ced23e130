"""Errors that become a single request's error response instead of failing a batch."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


class InvalidRequest(ValueError):
    """A request's inputs cannot be served; its message is sent back to that client only."""


class OverLimit(InvalidRequest):
    """A request exceeds a documented size limit (README, "Limits"); counted apart from other
    invalid input (``tritonrepo_step_errors_total{kind="over_limit"}``)."""


def check_each(items: Sequence[T], check: Callable[[T], object]) -> tuple[list, list[int]]:
    """Validate every item of a batch on its own.

    Returns:
        ``(results, valid)``: ``results`` has one entry per item, the :class:`InvalidRequest`
        that ``check`` raised for it or None; ``valid`` lists the indices that passed.
    """
    results: list = [None] * len(items)
    valid: list[int] = []
    for i, item in enumerate(items):
        try:
            check(item)
            valid.append(i)
        except InvalidRequest as exc:
            results[i] = exc
    return results, valid
