"""What a canary's shadow copies compare and how (tritonrepo_client.control.canary_measures):
each output's measure from its datatype and shape, the declared one instead, --min-agreement,
and the verdicts on distributions of per-row scores like the guard's summary (a constant
version changes a third of the decisions, a retrained one a few)."""

from __future__ import annotations

import pytest

from tritonrepo_client.control.canary_measures import (
    MIN_SHARE,
    Measure,
    default_measures,
    with_declared,
    with_min_agreement,
)
from tritonrepo_client.control.canary_policy import CanaryPolicy, judge
from tritonrepo_client.control.live_metrics import ModelFigures, Window

# The metadata outputs of a risk pipeline (batched) and of ctr_ranking (unbatched).
RISK = [
    {"name": "PROBABILITY", "datatype": "FP32", "shape": [-1, 1]},
    {"name": "CLASS_SCORES", "datatype": "FP32", "shape": [-1, 3]},
    {"name": "LABEL", "datatype": "BYTES", "shape": [-1, 1]},
    {"name": "EMBEDDING", "datatype": "FP32", "shape": [-1, 384]},
]
RANKING = [
    {"name": "ITEM_IDS", "datatype": "INT64", "shape": [-1]},
    {"name": "SCORES", "datatype": "FP32", "shape": [-1]},
]


def keys(measures: list[Measure]) -> list[tuple[str, str, float | None]]:
    return [(m.output, m.measure, m.limit) for m in measures]


def test_each_output_gets_the_measure_of_its_type() -> None:
    assert keys(default_measures(RISK, batched=True)) == [
        ("PROBABILITY", "decision", MIN_SHARE), ("PROBABILITY", "abs_diff", None),
        ("CLASS_SCORES", "argmax", MIN_SHARE), ("CLASS_SCORES", "abs_diff", None),
        ("LABEL", "exact", MIN_SHARE), ("EMBEDDING", "cosine", 0.99),
    ]  # fmt: skip
    assert keys(default_measures(RANKING, batched=False)) == [
        ("ITEM_IDS", "overlap", 0.8), ("SCORES", "cosine", 0.99),
    ]  # fmt: skip


def test_a_declared_measure_replaces_its_outputs_default_and_min_agreement_the_limits() -> None:
    declared = {"output": "EMBEDDING", "measure": "cosine", "min": 0.999}
    measures = with_declared(default_measures(RISK, True), declared)
    assert ("EMBEDDING", "cosine", 0.999) in keys(measures)
    assert len([m for m in measures if m.output == "EMBEDDING"]) == 1
    strict = with_min_agreement(measures, 0.97)
    assert {m.limit for m in strict if m.measure != "abs_diff"} == {0.97}
    assert [m.limit for m in strict if m.measure == "abs_diff"] == [None, None]
    with pytest.raises(ValueError, match="min-agreement"):
        with_min_agreement([Measure("P", "abs_diff")], 0.9)
    with pytest.raises(ValueError, match="is not one of"):
        with_declared([], {"output": "P", "measure": "median"})


def distribution(rows: int, mean: float, p05: float | None = None) -> dict:
    return {"rows": rows, "mean": mean, "p05": p05 if p05 is not None else mean, "p95": 0.0}


def window() -> Window:
    w = Window({"risk": ModelFigures(), "risk__canary": ModelFigures()})
    w.add({"risk": ModelFigures(success=100), "risk__canary": ModelFigures(success=30)})
    return w


@pytest.mark.parametrize(
    ("changed", "rolled_back"),
    [(0.03, False), (0.09, False), (0.12, True), (0.38, True), (0.5, True)],
    ids=["retrained", "retrained-harder", "just-over", "constant", "shuffled-labels"],
)
def test_a_share_of_changed_decisions_rolls_back_not_the_worst_row(changed, rolled_back) -> None:
    """The decision measure on 300 rows: a retrained version that changes a few decisions
    passes, however far its worst row moved; a constant version (a third changed) and one
    trained on shuffled labels (half) are rolled back, naming the output and the share."""
    measures = default_measures(RISK[:1], batched=True)
    shadow = {"compared": 300, "measures": {
        "PROBABILITY:decision": distribution(300, 1 - changed),
        "PROBABILITY:abs_diff": {"rows": 300, "mean": 0.2, "p95": 0.4, "max": 0.84},
    }}  # fmt: skip
    why = judge(window(), "risk", "risk__canary", shadow, CanaryPolicy(), measures)
    if not rolled_back:
        assert why is None
        return
    assert why is not None and "PROBABILITY decision at 0.5 agrees on" in why
    assert f"{1 - changed:.1%} of 300 rows (required ≥ 90%)" in why


def test_a_quantile_of_the_rows_similarity_is_judged() -> None:
    measures = default_measures(RISK[3:], batched=True)
    fine = {"compared": 50, "measures": {"EMBEDDING:cosine": distribution(50, 0.998, 0.995)}}
    off = {"compared": 50, "measures": {"EMBEDDING:cosine": distribution(50, 0.99, 0.95)}}
    assert judge(window(), "risk", "risk__canary", fine, CanaryPolicy(), measures) is None
    why = judge(window(), "risk", "risk__canary", off, CanaryPolicy(), measures)
    assert why is not None and "EMBEDDING cosine p05 0.9500 over 50 rows" in why
