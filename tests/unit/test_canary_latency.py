"""The canary's latency rule (tritonrepo_client.control.canary_policy.slower) without a
server: which figures are compared (the shadow copies, both versions answering each at once,
or else Triton's summaries), which quantile for how many requests (the highest the window
supports), that one request held up among a few does not roll a version back while a version
slow at its median does, and that a p99 far above the serving one's rolls it back however
few requests there were, once they are 100.
"""

from __future__ import annotations

from typing import Any

from tritonrepo_client.control.canary_policy import (
    GROSS_P99_REQUESTS,
    P99_REQUESTS,
    CanaryPolicy,
    slower,
    supported_quantile,
)
from tritonrepo_client.control.live_metrics import ModelFigures, Window

POLICY = CanaryPolicy(min_requests=20, max_p99_ratio=4.0)
SERVING, CANARY = "text_embedding", "text_embedding__canary"
NO_COPIES: dict[str, Any] = {}


def window(canary_requests: int, canary_p50_ms: float, canary_p99_ms: float) -> Window:
    """A window in which the serving pipeline answered 1,000 requests (p50 15 ms, p99 73 ms)
    and the canary ``canary_requests`` with the given quantiles (Triton's summaries)."""
    w = Window({SERVING: ModelFigures(), CANARY: ModelFigures()})
    w.add({
        SERVING: ModelFigures(success=1000, p50_us=15_000, p99_us=73_000),
        CANARY: ModelFigures(success=canary_requests, p50_us=canary_p50_ms * 1000,
                             p99_us=canary_p99_ms * 1000),
    })  # fmt: skip
    return w


def copies(n: int, canary_ms: tuple[float, ...], stable_ms: tuple[float, ...]) -> dict:
    """The guard's summary of ``n`` shadow copies: (p50, p99) or (p50, p90, p95, p99) of each
    version, ms."""
    names = ("p50", "p99") if len(canary_ms) == 2 else ("p50", "p90", "p95", "p99")
    summary: dict[str, Any] = {"compared": n}
    for name, ours, theirs in zip(names, canary_ms, stable_ms, strict=True):
        summary[f"canary_{name}_ms"], summary[f"stable_{name}_ms"] = ours, theirs
    return summary


def judged(w: Window, shadow: dict[str, Any]) -> str | None:
    requests, _ = w.requests(CANARY, ensemble=True)
    return slower(w, shadow, SERVING, CANARY, requests, POLICY)


def test_one_request_held_up_among_few_does_not_roll_back() -> None:
    # 50 requests: Triton's 0.99 quantile is the slowest one (a 524 ms hiccup).
    assert judged(window(50, 18.0, 524.0), NO_COPIES) is None
    # 500: the p99 is the fifth slowest; under 5 x the serving version's 73 ms it stays.
    assert judged(window(500, 18.0, 300.0), NO_COPIES) is None


def test_a_p99_far_above_the_serving_one_rolls_back_from_300_requests() -> None:
    """The p50 alone does not promote a canary whose tail is several times the serving one."""
    assert judged(window(GROSS_P99_REQUESTS - 1, 18.0, 524.0), NO_COPIES) is None
    why = judged(window(GROSS_P99_REQUESTS, 18.0, 524.0), NO_COPIES)
    assert why is not None and why.startswith("the canary's p99 is 524.0 ms over 300 requests")
    assert "5 x the serving version's 73.0 ms" in why


def test_a_version_slow_at_its_median_rolls_back_before_100_requests() -> None:
    why = judged(window(50, 80.0, 524.0), NO_COPIES)
    assert why is not None and why.startswith("the canary's p50 is 80.0 ms over 50 requests")
    assert "4 x the serving version's 15.0 ms" in why


def test_triton_s_p99_is_compared_at_the_policy_s_ratio_from_1000_requests_on() -> None:
    # Below 1,000 requests only the 5 x rule reads Triton's p99 (under it: 300 ms of 73).
    assert judged(window(P99_REQUESTS - 1, 18.0, 300.0), NO_COPIES) is None
    why = judged(window(P99_REQUESTS, 18.0, 300.0), NO_COPIES)
    assert why is not None and why.startswith("the canary's p99 is 300.0 ms over 1000 requests")
    why = judged(window(P99_REQUESTS, 18.0, 524.0), NO_COPIES)
    assert why is not None and why.startswith("the canary's p99 is 524.0 ms over 1000 requests")
    assert judged(window(P99_REQUESTS, 18.0, 290.0), NO_COPIES) is None  # under 4 x 73 ms


def test_latency_is_not_judged_before_the_policys_minimum_of_requests() -> None:
    assert judged(window(POLICY.min_requests - 1, 500.0, 900.0), NO_COPIES) is None
    assert judged(window(POLICY.min_requests, 500.0, 900.0), NO_COPIES) is not None


def test_shadow_copies_are_compared_with_their_twins_not_with_the_live_requests() -> None:
    # Seen on 2 cores: the copies (the canary's only requests in the shadow window) waited out
    # the batcher's 500 ms on both versions, the live requests rarely.
    w = window(1370, 20.0, 516.7)
    assert judged(w, copies(1370, (21.0, 527.0), (20.0, 524.0))) is None
    why = judged(w, copies(1370, (21.0, 2400.0), (20.0, 524.0)))
    assert why is not None
    assert why.startswith("the canary's p99 is 2400.0 ms over 1370 shadow copies")
    assert judged(window(137, 20.0, 60.0), copies(137, (21.0, 150.0), (20.0, 64.0))) is None
    # Of 137 copies the p99 is one or two of them (one stall): not judged; of 300, three.
    assert judged(window(137, 20.0, 60.0), copies(137, (21.0, 521.0), (20.0, 64.0))) is None
    why = judged(window(300, 20.0, 60.0), copies(300, (21.0, 521.0), (20.0, 64.0)))
    assert why is not None and why.startswith("the canary's p99 is 521.0 ms over 300 shadow")
    why = judged(window(137, 20.0, 60.0), copies(50, (90.0, 200.0), (20.0, 60.0)))
    assert why is not None and why.startswith("the canary's p50 is 90.0 ms over 50 shadow copies")


def test_triton_figures_stand_in_while_there_are_too_few_copies() -> None:
    why = judged(window(150, 80.0, 524.0), copies(POLICY.min_requests - 1, (20, 30), (20, 30)))
    assert why is not None and why.startswith("the canary's p50 is 80.0 ms over 150 requests")


def test_the_quantile_compared_is_the_highest_the_copies_support() -> None:
    assert [supported_quantile(n) for n in (20, 99, 100, 199, 200, 999, 1000)] == [
        "p50", "p50", "p90", "p90", "p95", "p95", "p99",
    ]  # fmt: skip
    # 250 copies: the p95 is compared (the canary's 3.4 x is within 4 x), then the p99 5 x.
    assert judged(window(250, 20, 60), copies(250, (20, 50, 68, 90), (20, 30, 20, 60))) is None
    why = judged(window(250, 20, 60), copies(250, (20, 50, 90, 90), (20, 30, 20, 60)))
    assert why is not None and why.startswith("the canary's p95 is 90.0 ms over 250 shadow")
