"""What rolls a canary back (``tritonrepo_client.control.canary_policy.judge``) and which policies
are refused, without a server; the latency rule alone is ``test_canary_latency.py``.

The figures are of the kind a window reads on two cores (tests/server/test_canary.py prints
them): the serving ``text_embedding`` answering a few hundred requests in 8 s at a p50 of about
15 ms, the canary its share of them. Triton 2.51 counts each failed request of an ensemble twice
in ``nv_inference_request_failure`` (docs/operations/monitoring.md): a counter that grew by 12
is 6 failed requests.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tritonrepo_client.cli.app import main as cli
from tritonrepo_client.control.canary_measures import Measure
from tritonrepo_client.control.canary_policy import CanaryPolicy, judge
from tritonrepo_client.control.live_metrics import ModelFigures, Window

POLICY = CanaryPolicy(min_requests=20, max_error_ratio_delta=0.01, max_p99_ratio=4.0)
SERVING, CANARY = "text_embedding", "text_embedding__canary"
COSINE = Measure("EMBEDDING", "cosine", limit=0.99)


def window(
    served: int, served_failure_counter: int, canary: int, canary_failure_counter: int
) -> Window:
    """A window whose counters grew by these figures (successes, and Triton's failure counters,
    each failed ensemble request counted twice); both at a p50 of 15 ms and a p99 of 60 ms."""
    start = {SERVING: ModelFigures(success=4210, failure=2), CANARY: ModelFigures()}
    w = Window(start)
    w.add({
        SERVING: ModelFigures(success=4210 + served, failure=2 + served_failure_counter,
                              p50_us=15_000, p99_us=60_000),
        CANARY: ModelFigures(success=canary, failure=canary_failure_counter,
                             p50_us=15_400, p99_us=61_000),
    })  # fmt: skip
    return w


def shadow(compared: int, **figures: Any) -> dict[str, Any]:
    """The guard's summary of ``compared`` shadow copies answered alike in time."""
    return {
        "compared": compared, "canary_failed": 0, "stable_failed": 0,
        "canary_p50_ms": 16.0, "canary_p99_ms": 70.0, "stable_p50_ms": 15.0,
        "stable_p99_ms": 66.0,
        "measures": {"EMBEDDING:cosine": {"rows": compared, "mean": 0.99999, "p05": 0.99997}},
    } | figures  # fmt: skip


def cosines(compared: int, p05: float) -> dict[str, Any]:
    """The guard's distribution of ``compared`` rows' cosines whose 5th percentile is ``p05``."""
    return {"EMBEDDING:cosine": {"rows": compared, "mean": max(p05, 0.5), "p05": p05}}


def judged(
    w: Window, copies: dict[str, Any], measures: tuple[Measure, ...] = (COSINE,)
) -> str | None:
    return judge(w, SERVING, CANARY, copies, POLICY, measures)


def test_a_canary_failing_more_than_the_serving_version_is_rolled_back() -> None:
    # 6 of 194 canary requests failed (3.1 %); the serving version 1 of 1,721 (0.1 %).
    why = judged(window(1720, 2, 188, 12), shadow(40))
    assert why == "the canary failed 6 of 194 requests (3.1%); the serving version 0.1%", why


def test_failures_within_the_allowed_delta_do_not_roll_back() -> None:
    # 1 of 188 (0.5 %) against 0.1 %: within 1 point.
    assert judged(window(1720, 2, 187, 2), shadow(40)) is None
    # The serving version failing as much: 3 of 188 (1.6 %) against 20 of 1,740 (1.1 %).
    assert judged(window(1720, 40, 185, 6), shadow(40)) is None
    # 3 of 188 against none: 1.6 % is over 0 + 1 point.
    why = judged(window(1720, 0, 185, 6), shadow(40))
    assert why is not None and why.startswith("the canary failed 3 of 188 requests (1.6%)")


def test_the_failure_counter_of_an_ensemble_is_halved() -> None:
    # A counter up by 2 is one failed request: 1 of 188 is 0.5 %, within the delta. Counted
    # as 2 failures it would be 1.1 % and roll back.
    assert judged(window(1720, 0, 187, 2), shadow(40)) is None


def test_failures_decide_before_latency() -> None:
    slow = shadow(40, canary_p50_ms=200.0)
    assert judged(window(1720, 0, 188, 0), slow).startswith("the canary's p50 is 200.0 ms")
    assert judged(window(1720, 0, 188, 12), slow).startswith("the canary failed 6 of 194")


def test_failed_shadow_copies_roll_back() -> None:
    why = judged(window(1720, 0, 188, 0), shadow(40, canary_failed=3))
    assert why == "the canary failed 3 of 40 shadow copies"


def test_answers_whose_measure_breaks_its_limit_roll_back() -> None:
    why = judged(window(1720, 0, 188, 0), shadow(40, measures=cosines(40, 0.1032)))
    assert why == (
        "the canary's answers differ: EMBEDDING cosine p05 0.1032 over 40 rows (required ≥ 0.99)"
    )
    assert judged(window(1720, 0, 188, 0), shadow(40, measures=cosines(40, 0.9912))) is None
    # A measure without a limit is reported, not judged.
    unjudged = (Measure("EMBEDDING", "cosine"),)
    assert judged(window(1720, 0, 188, 0), shadow(40, measures=cosines(40, 0.1)), unjudged) is None


def test_a_healthy_window_passes() -> None:
    assert judged(window(1720, 2, 188, 0), shadow(40)) is None


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ({"steps": (10.0, 60.0)}, "steps [10.0, 60.0]: give shares of 1 to 50 percent"),
        ({"steps": (0.0,)}, "steps [0.0]: give shares of 1 to 50 percent"),
        ({"shadow": 101.0}, "shadow 101: give a share of 0 to 100 percent"),
        (
            {"steps": (50.0,), "shadow": 60.0},
            "steps [50.0] and shadow 60: a step's share and the shadow share together exceed",
        ),
        ({"steps": (), "shadow": 0.0}, "no steps runs the shadow window alone"),
        ({"window_s": 0.0}, "the window, the reading interval and the p99 ratio must be above 0"),
        ({"interval_s": -1.0}, "the window, the reading interval and the p99 ratio"),
        ({"max_p99_ratio": 0.0}, "the window, the reading interval and the p99 ratio"),
        ({"min_requests": 0}, "min_requests 0: give at least 1"),
    ],
)
def test_a_policy_the_guard_or_a_window_cannot_follow_is_refused(
    policy: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        CanaryPolicy(**policy)


STEPS_MESSAGE = "give shares of 1 to 50 percent"


@pytest.mark.parametrize(
    ("before", "after", "message"),
    [
        ([], ["--steps", "10,60"], f"steps [10.0, 60.0]: {STEPS_MESSAGE}"),
        ([], ["--steps", "ten"], f"--steps 'ten': {STEPS_MESSAGE}, comma-separated"),
        ([], ["--steps", "", "--shadow", "0"], "no steps runs the shadow window alone: give a "
         "shadow share above 0"),
        (["--protocol", "grpc"], [], "canary works through the HTTP guard: use --protocol http "
         "(the default)"),
    ],
)  # fmt: skip
def test_the_command_refuses_a_policy_before_connecting(
    before: list[str], after: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 1 with one line, before any connection: the URL is a port nothing listens on."""
    code = cli([
        "--url", "127.0.0.1:9", *before, "canary", SERVING, "--model", "text_embedding_encoder",
        "--version", "2", *after,
    ])  # fmt: skip
    assert (code, capsys.readouterr().err) == (1, f"error: {message}\n")
