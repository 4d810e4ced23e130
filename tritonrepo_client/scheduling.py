"""Per-request scheduling: priority level and Triton's queue timeout.

The core models' dynamic batchers have two priority levels (``priority_levels: 2`` in their
configs; README, "Priority and queue limits"):

* :data:`REALTIME` (1, the default of a request that names none): served first;
* :data:`BULK` (2): batch jobs and backfills; waits while real-time requests queue, and has
  its own, larger queue limit.

An ensemble passes its request's priority and timeout to every step (Triton's
``ensemble_scheduler.cc``: ``SetPriority`` / ``SetTimeoutMicroseconds`` on each step request),
so setting them on the ensemble request is enough. Triton maps a priority of 0, or above the
model's levels, to the model's default level.
"""

from __future__ import annotations

from typing import Any

REALTIME = 1
BULK = 2
PRIORITIES = {"realtime": REALTIME, "bulk": BULK}


def parse_priority(text: str) -> int:
    """A priority level from a name (``realtime``, ``bulk``) or a number 0..2 (the levels the
    core models have; Triton would map a higher number to the default level, real-time, the
    opposite of what a caller asking for "lower than bulk" means).

    Raises:
        ValueError: neither (argparse turns it into a usage error).
    """
    name = text.strip().lower()
    if name in PRIORITIES:
        return PRIORITIES[name]
    if name in ("0", "1", "2"):
        return int(name)
    raise ValueError(
        f"priority must be realtime, bulk or 0..2 (0 = the model's default), got {text!r}"
    )


def request_timeout_us(deadline_s: float) -> int:
    """Triton's request ``timeout`` parameter (µs, >= 1) for a client deadline in seconds: a
    model whose queue policy has ``allow_timeout_override`` drops the request from its queue
    once it passes."""
    return max(1, int(deadline_s * 1e6))


def scheduling_kwargs(priority: int, timeout_us: int | None, deadline_s: float) -> dict[str, Any]:
    """tritonclient ``infer`` arguments for a request's priority and queue timeout.

    Args:
        priority: priority level, >= 0 (1 = :data:`REALTIME`, 2 = :data:`BULK`; 0 = the
            model's default; Triton maps a level above the model's ``priority_levels`` to its
            default level).
        timeout_us: Triton's queue timeout in µs (>= 1): the request is rejected if it is still
            queued after this long. None = the client deadline ``deadline_s`` (seconds).

    Returns:
        ``{"timeout": µs}`` plus ``{"priority": n}`` when ``priority`` is not 0.

    Raises:
        ValueError: ``priority`` < 0 or ``timeout_us`` < 1 (or either not an integer).
    """
    if isinstance(priority, bool) or not isinstance(priority, int) or priority < 0:
        raise ValueError(f"priority must be an integer >= 0 (1 realtime, 2 bulk), got {priority!r}")
    if timeout_us is not None and (
        isinstance(timeout_us, bool) or not isinstance(timeout_us, int) or timeout_us < 1
    ):
        raise ValueError(f"timeout_us must be an integer >= 1 µs, got {timeout_us!r}")
    kwargs: dict[str, Any] = {
        "timeout": timeout_us if timeout_us is not None else request_timeout_us(deadline_s)
    }
    if priority:
        kwargs["priority"] = priority
    return kwargs
