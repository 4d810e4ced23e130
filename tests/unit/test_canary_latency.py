"""The canary's latency rule (tritonrepo_client.control.canary.slower) without a server: which
quantile of Triton's summaries is compared for how many canary requests, and that one request
held up does not roll a version back while a version slow at its median does."""

from __future__ import annotations

from tritonrepo_client.control.canary import P99_REQUESTS, CanaryPolicy, slower
from tritonrepo_client.control.live_metrics import ModelFigures, Window

POLICY = CanaryPolicy(min_requests=20, max_p99_ratio=4.0)
SERVING, CANARY = "text_embedding", "text_embedding__canary"


def window(canary_requests: int, canary_p50_ms: float, canary_p99_ms: float) -> Window:
    """A window in which the serving pipeline answered 1,000 requests (p50 15 ms, p99 100 ms)
    and the canary ``canary_requests`` with the given quantiles."""
    start = {SERVING: ModelFigures(), CANARY: ModelFigures()}
    w = Window(start)
    w.add({
        SERVING: ModelFigures(success=1000, p50_us=15_000, p99_us=100_000),
        CANARY: ModelFigures(success=canary_requests, p50_us=canary_p50_ms * 1000,
                             p99_us=canary_p99_ms * 1000),
    })  # fmt: skip
    return w


def judged(canary_requests: int, p50_ms: float, p99_ms: float) -> str | None:
    w = window(canary_requests, p50_ms, p99_ms)
    requests, _ = w.requests(CANARY, ensemble=True)
    return slower(w, SERVING, CANARY, requests, POLICY)


def test_one_request_held_up_among_few_does_not_roll_back() -> None:
    # 50 requests: Triton's 0.99 quantile is the slowest one (a 524 ms batcher wait).
    assert judged(50, p50_ms=18.0, p99_ms=524.0) is None


def test_a_version_slow_at_its_median_rolls_back_before_100_requests() -> None:
    why = judged(50, p50_ms=80.0, p99_ms=524.0)
    assert why is not None and why.startswith("the canary's p50 is 80.0 ms over 50 requests")
    assert "4 x the serving version's 15.0 ms" in why


def test_the_p99_is_compared_from_100_requests_on() -> None:
    why = judged(P99_REQUESTS, p50_ms=18.0, p99_ms=524.0)
    assert why is not None and why.startswith("the canary's p99 is 524.0 ms over 100 requests")
    assert judged(P99_REQUESTS, p50_ms=18.0, p99_ms=390.0) is None  # under 4 x 100 ms


def test_latency_is_not_judged_before_the_policys_minimum_of_requests() -> None:
    assert judged(POLICY.min_requests - 1, p50_ms=500.0, p99_ms=900.0) is None
    assert judged(POLICY.min_requests, p50_ms=500.0, p99_ms=900.0) is not None
