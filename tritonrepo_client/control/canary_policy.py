"""What rolls a canary back: its policy (steps, windows, thresholds) and the rules applied to
each analysis window's figures (Triton's per-model summaries and the guard's shadow comparison).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tritonrepo_client.control.canary_measures import Measure
from tritonrepo_client.control.live_metrics import Window

# Requests a window needs before the canary's p99 is compared (its p50 before): ten of them
# above the 0.99 quantile. Of fewer than 100 the 0.99 quantile is the slowest one; of a few
# hundred it is decided by whether two or three requests were held up (a host's hiccup, or a
# batcher waiting out 500 ms with a queue policy, docs/known_issues.md), on either version.
P99_REQUESTS = 1000
# The latency quantile a window of n compared requests supports, highest first: the quantile
# with ten requests above it (the shadow copies, which the guard summarises at each of these).
SUPPORTED_QUANTILES = ((1000, "p99"), (200, "p95"), (100, "p90"), (0, "p50"))
# Whatever quantile the window supports, a canary whose p99 is this many times the serving
# version's is rolled back, from 300 requests on: the p99 then rests on three requests. Of
# fewer it is one or two, which one stall holds up (a 2-core host under load showed a good
# version's p99 at 88 ms against 12 ms over 119 shadow copies, its p50 equal).
GROSS_P99_RATIO = 5.0
GROSS_P99_REQUESTS = 300


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
        max_p99_ratio: the canary's latency at the quantile its requests support
            (:func:`slower`) may be this many times the serving one's.
        min_agreement: the limit of every compared output judged by a share of agreeing rows
            or a quantile of their similarity (``--min-agreement``; None: each measure's own,
            :mod:`tritonrepo_client.control.canary_measures`).
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


def supported_quantile(requests: float) -> str:
    """The highest latency quantile ``requests`` compared requests support
    (:data:`SUPPORTED_QUANTILES`): ``p99``, ``p95``, ``p90`` or ``p50``."""
    return next(label for least, label in SUPPORTED_QUANTILES if requests >= least)


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
    versions at once, so the two see the same inputs under the same load; the quantile is the
    highest the copies support (:func:`supported_quantile`). Without enough copies they are
    Triton's own summaries of the canary ensemble (``requests`` in the window) and of the
    pipeline (:mod:`tritonrepo_client.control.live_metrics`, which keeps p50 and p99), from
    ``policy.min_requests`` canary requests on: the p99 from ``P99_REQUESTS`` requests on, the
    p50 before. Either way a p99 over :data:`GROSS_P99_RATIO` times the serving one rolls the
    canary back from :data:`GROSS_P99_REQUESTS` requests on, whatever quantile is compared.
    """
    copies = shadow.get("compared") or 0
    checks: list[tuple[str, float, float, float]] = []  # label, ours, theirs, ratio
    if copies >= policy.min_requests:
        basis, count = f"{copies} shadow copies", copies
        label = supported_quantile(copies)

        def figure(side: str, name: str) -> float:
            return float(shadow.get(f"{side}_{name}_ms") or 0.0)

        checks.append((label, figure("canary", label), figure("stable", label),
                       policy.max_p99_ratio))  # fmt: skip
        gross = (figure("canary", "p99"), figure("stable", "p99"))
    elif requests >= policy.min_requests:
        basis, count = f"{requests:.0f} requests", requests
        label = "p99" if requests >= P99_REQUESTS else "p50"
        worst_us = window.worst_p99_us if label == "p99" else window.worst_p50_us
        checks.append((label, worst_us.get(canary, 0.0) / 1000, worst_us.get(pipeline, 0.0) / 1000,
                       policy.max_p99_ratio))  # fmt: skip
        gross = (window.worst_p99_us.get(canary, 0.0) / 1000,
                 window.worst_p99_us.get(pipeline, 0.0) / 1000)  # fmt: skip
    else:
        return None
    if count >= GROSS_P99_REQUESTS and checks[0][0] != "p99":
        checks.append(("p99", *gross, GROSS_P99_RATIO))
    for label, ours, theirs, ratio in checks:
        if ours and theirs and ours > ratio * theirs:
            return (
                f"the canary's {label} is {ours:.1f} ms over {basis}, over "
                f"{ratio:g} x the serving version's {theirs:.1f} ms"
            )
    return None


def judge(
    window: Window,
    pipeline: str,
    canary: str,
    shadow: dict[str, Any],
    policy: CanaryPolicy,
    measures: Sequence[Measure] = (),
    ensemble: bool = True,
) -> str | None:
    """Why the canary must be rolled back after ``window``, or None: it failed more requests
    than the serving version (by ``max_error_ratio_delta``), it is slower
    (:func:`slower`), it failed shadow copies, or a compared output breaks its limit
    (``measures``, judged on the guard's per-row scores of the window:
    :mod:`tritonrepo_client.control.canary_measures`). ``ensemble``: both are ensembles, whose
    failures Triton counts twice."""
    requests, failed = window.requests(canary, ensemble)
    served, served_failed = window.requests(pipeline, ensemble)
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
    compared = shadow.get("measures") or {}
    for measure in measures:
        if measure.failed(compared.get(measure.key)):
            return f"the canary's answers differ: {measure.describe(compared.get(measure.key))}"
    return None


def compared_line(shadow: dict[str, Any], measures: Sequence[Measure]) -> str:
    """What the shadow copies compared, one phrase per measure (for the window's line)."""
    compared = shadow.get("measures") or {}
    return "; ".join(m.describe(compared.get(m.key)) for m in measures) or "no output compared"
