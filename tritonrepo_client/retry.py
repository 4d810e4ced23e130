"""Retries with exponential backoff and full jitter for idempotent calls.

"Full jitter" (a uniform delay in ``[0, min(cap, base * 2**attempt)]``) is the variant the AWS
Architecture Blog's "Exponential Backoff And Jitter" (M. Brooker, 2015) found to spread
retrying clients best; gRPC's connection-backoff spec uses the same doubling with a cap.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class RetryPolicy:
    """When and how often a call is tried again.

    Attributes:
        attempts: tries in all, >= 1 (1 = never retry).
        initial_backoff_s: upper bound of the first delay, seconds.
        max_backoff_s: cap of every delay, seconds.
        multiplier: growth of the bound per retry.
        retry_on: :class:`tritonrepo_client.errors.ClientError` kinds retried:
            ``"unreachable"`` (no connection) and ``"unavailable"`` (Triton UNAVAILABLE / 503)
            by default; never ``"invalid"`` or ``"timeout"``.

    Raises:
        ValueError: ``attempts`` < 1 or a negative backoff.
    """

    attempts: int = 4
    initial_backoff_s: float = 0.1
    max_backoff_s: float = 2.0
    multiplier: float = 2.0
    retry_on: tuple[str, ...] = ("unreachable", "unavailable")

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.initial_backoff_s < 0 or self.max_backoff_s < 0:
            raise ValueError(f"invalid retry policy {self}")

    def delays(self, rng: random.Random | None = None) -> Iterator[float]:
        """The ``attempts - 1`` delays before each retry, seconds (full jitter)."""
        rng = rng or random.Random()
        for retry in range(self.attempts - 1):
            bound = min(self.max_backoff_s, self.initial_backoff_s * self.multiplier**retry)
            yield rng.uniform(0.0, bound)


class Schedule:
    """The tries of one call under a policy: counts them and says what follows a failure.

    Both the thread and the asyncio call loops use it (through
    :class:`tritonrepo_client.core.CallAttempts`), so they retry alike.
    """

    def __init__(self, policy: RetryPolicy, rng: random.Random | None = None) -> None:
        self.policy = policy
        self.attempt = 1  # the try running now, 1-based
        self._delays = policy.delays(rng)

    def next_delay(self, kind: str) -> float | None:
        """Seconds to wait before the next try after the current one failed with an error of
        ``kind`` (:attr:`tritonrepo_client.errors.ClientError.kind`); None: give up (a kind
        not in ``retry_on``, or no tries left)."""
        if kind not in self.policy.retry_on:
            return None
        delay = next(self._delays, None)
        if delay is not None:
            self.attempt += 1
        return delay


# Sessions are not idempotent: a retried event may have been recorded already.
NO_RETRY = RetryPolicy(attempts=1)
