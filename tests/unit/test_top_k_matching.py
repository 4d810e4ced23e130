"""The served-vs-reference top-K comparison of ``tests/top_k.py``: near-ties may trade ranks,
nothing else may."""

from __future__ import annotations

import numpy as np

from tests.top_k import match_top_k, score_problems

NAMES = ["a", "b", "crane", "d", "crane", "f"]
# Reference probabilities: a 0.40, b 0.25, crane(2) 0.1500, d 0.1499, crane(4) 0.05, f 0.0499.
REFERENCE = np.array([0.40, 0.25, 0.1500, 0.1499, 0.05, 0.0499])


def test_the_reference_order_agrees():
    classes, problems = match_top_k(["a", "b", "crane", "d"], REFERENCE, NAMES, 2e-4)
    assert (classes, problems) == ([0, 1, 2, 3], [])


def test_near_ties_may_trade_ranks_and_a_tied_class_may_replace_the_last():
    assert match_top_k(["a", "b", "d", "crane"], REFERENCE, NAMES, 2e-4) == ([0, 1, 3, 2], [])
    # Top-5 ends with f instead of crane(4): 0.0001 apart.
    classes, problems = match_top_k(["a", "b", "crane", "d", "f"], REFERENCE, NAMES, 2e-4)
    assert (classes, problems) == ([0, 1, 2, 3, 5], [])


def test_a_swap_beyond_the_tie_is_a_problem():
    classes, problems = match_top_k(["b", "a", "crane"], REFERENCE, NAMES, 2e-4)
    assert classes == [-1, -1, 2]
    assert len(problems) == 2 and problems[0].startswith("rank 1: 'b'"), problems
    assert match_top_k(["a", "b", "d", "crane"], REFERENCE, NAMES, 1e-5)[1] != []  # tie smaller
    assert match_top_k(["a", "x"], REFERENCE, NAMES, 1.0)[1] == [
        "rank 2: 'x' (no class) where the reference has 'b' (1: 0.25), beyond a tie of 1.0"
    ]


def test_a_repeated_name_stands_for_the_class_that_agrees():
    top5 = ["a", "b", "crane", "d", "crane"]
    assert match_top_k(top5, REFERENCE, NAMES, 2e-4) == ([0, 1, 2, 3, 4], [])
    classes, problems = match_top_k(["a", "crane", "crane"], REFERENCE, NAMES, 0.2)
    assert classes == [0, 2, 2] and problems == ["class 2 ('crane') served twice"]


def test_scores_are_compared_class_by_class_and_must_descend():
    classes = [0, 1, 3, 2]
    close = [0.40003, 0.24995, 0.1500, 0.1499]
    assert score_problems(close, classes, REFERENCE, 1e-4) == []
    far = [0.4002, 0.25, 0.1499, 0.1500]
    assert [p.split(":")[0] for p in score_problems(far, classes, REFERENCE, 1e-4)] == [
        "rank 1",
        "rank 4",  # 0.15 after 0.1499
    ]
    assert score_problems([0.4, 0.25], [0, -1], REFERENCE, 1e-4) == []  # -1: a ranking problem
