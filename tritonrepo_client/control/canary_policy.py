"""What rolls a canary back: its policy (steps, windows, thresholds) and the rules applied to
each analysis window's figures (Triton's per-model summaries and the guard's shadow comparison).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tritonrepo_client.control.live_metrics import Window

# Requests a window needs before the canary's p99 is compared (its p50 before): ten of them
# above the 0.99 quantile. Of fewer than 100 the 0.99 quantile is the slowest one; of a few
# hundred it is decided by whether two or three requests were held up (on Triton often: a
# batcher waits out 500 ms now and then, docs/known_issues.md), on either version.
P99_REQUESTS = 1000


@dataclass(frozen=True)
class CanaryPolicy:
    """How far and how fast a canary goes, and what rolls it back.

    Attributes:
        steps: the canary's share of requests at each step, percent (each 1 to 50).
        shadow: percent of the pipeline's requests copied to the canary and compared (the
            answers thrown away), from the start.
        window_s: each step's analysis window, seconds.
        interval_s: how often the figures are read within it, seconds.
        min_requests: canary requests a window needs before it may pass (fewer: it is
            extended, up to twice).
        max_error_ratio_delta: the canary's failed share may exceed the serving one's by this.
        max_p99_ratio: the canary's p99 (its p50 while it has had fewer than ``P99_REQUESTS``
            requests in the window) may be this many times the serving one's.
        min_agreement: the smallest agreement of a compared answer (None: the pipeline's
            declared ``min``, or no agreement check).
    """

    steps: tuple[float, ...] = (10.0, 50.0)
    shadow: float = 10.0
    window_s: float = 60.0
    interval_s: float = 2.0
    min_requests: int = 20
    max_error_ratio_delta: float = 0.01
    max_p99_ratio: float = 2.0
    min_agreement: float | None = None

    def __post_init__(self) -> None:
        """Raises ValueError for a policy the guard or a window could not follow (checked
        before anything is loaded)."""
        if any(not 0 < s <= 50 for s in self.steps):
            raise ValueError(f"steps {list(self.steps)}: give shares of 1 to 50 percent")
        if not 0 <= self.shadow <= 100:
            raise ValueError(f"shadow {self.shadow:g}: give a share of 0 to 100 percent")
        if any(s + self.shadow > 100 for s in self.steps):
            raise ValueError(
                f"steps {list(self.steps)} and shadow {self.shadow:g}: a step's share and the "
                "shadow share together exceed 100 percent"
            )
        if not self.steps and not self.shadow > 0:
            raise ValueError("no steps runs the shadow window alone: give a shadow share above 0")
        if not (self.window_s > 0 and self.interval_s > 0 and self.max_p99_ratio > 0):
            raise ValueError("the window, the reading interval and the p99 ratio must be above 0")
        if self.min_requests < 1:
            raise ValueError(f"min_requests {self.min_requests}: give at least 1")


def slower(
    window: Window,
    shadow: dict[str, Any],
    pipeline: str,
    canary: str,
    requests: float,
    policy: CanaryPolicy,
) -> str | None:
    """Why the canary is too slow after ``window``, or None.

    The latencies compared are those of the shadow copies (``shadow``, the guard's summary of
    the window) once there are ``policy.min_requests`` of them: each copy is answered by both
    versions at once, so the two see the same inputs under the same load. Without enough copies
    they are Triton's own summaries of the canary ensemble (``requests`` in the window) and of
    the pipeline (:mod:`tritonrepo_client.control.live_metrics`), from ``policy.min_requests``
    canary requests on. Either way the p99 is compared from ``P99_REQUESTS`` requests on and
    the p50 before: a p99 of fewer rests on a few requests held up (a host's hiccup, or
    Triton's batcher waiting out its 500 ms with a queue policy: docs/known_issues.md), which
    do not make a version slow.
    """
    copies = shadow.get("compared") or 0
    if copies >= policy.min_requests:
        label = "p99" if copies >= P99_REQUESTS else "p50"
        ours, theirs = shadow.get(f"canary_{label}_ms"), shadow.get(f"stable_{label}_ms")
        basis = f"{copies} shadow copies"
    elif requests >= policy.min_requests:
        label = "p99" if requests >= P99_REQUESTS else "p50"
        worst_us = window.worst_p99_us if label == "p99" else window.worst_p50_us
        ours, theirs = worst_us.get(canary, 0.0) / 1000, worst_us.get(pipeline, 0.0) / 1000
        basis = f"{requests:.0f} requests"
    else:
        return None
    if ours and theirs and ours > policy.max_p99_ratio * theirs:
        return (
            f"the canary's {label} is {ours:.1f} ms over {basis}, over "
            f"{policy.max_p99_ratio:g} x the serving version's {theirs:.1f} ms"
        )
    return None


def judge(
    window: Window,
    pipeline: str,
    canary: str,
    shadow: dict[str, Any],
    policy: CanaryPolicy,
    min_agreement: float | None,
) -> str | None:
    """Why the canary must be rolled back after ``window``, or None."""
    requests, failed = window.requests(canary, ensemble=True)
    served, served_failed = window.requests(pipeline, ensemble=True)
    ratio = failed / requests if requests else 0.0
    served_ratio = served_failed / served if served else 0.0
    if failed and ratio > served_ratio + policy.max_error_ratio_delta:
        return (
            f"the canary failed {failed:.0f} of {requests:.0f} requests ({ratio:.1%}); the "
            f"serving version {served_ratio:.1%}"
        )
    too_slow = slower(window, shadow, pipeline, canary, requests, policy)
    if too_slow:
        return too_slow
    if shadow.get("canary_failed"):
        return f"the canary failed {shadow['canary_failed']} of {shadow['compared']} shadow copies"
    low = shadow.get("agreement_min")
    if min_agreement is not None and low is not None and low < min_agreement:
        return (
            f"the canary's answers agree {low:.4f} at worst with the serving version's "
            f"over {shadow['agreements']} shadow copies (required ≥ {min_agreement:g})"
        )
    return None
