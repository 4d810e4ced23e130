"""Comparing a served top-K with a reference's scores of every class, up to near-ties.

Two classes whose reference scores are within ``tie`` of each other may come out in either
order on another machine, build or precision (the last digits of a float32 network's outputs
differ between CPUs); every other class must sit at the reference's rank. Used by
``tests/server/test_image_classification.py`` and ``tests/gpu/test_gpu_image.py``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def match_top_k(
    labels: Sequence[str], reference: np.ndarray, names: Sequence[str], tie: float
) -> tuple[list[int], list[str]]:
    """Match a served top-K, given by its labels, with the reference's ranking.

    Rank ``r`` agrees when its label names the class the reference puts at rank ``r``, or a
    class whose reference score is within ``tie`` of that class's (a near-tie: the two may
    trade places). ImageNet has repeated names (two ``crane``s, two ``maillot``s): a label
    stands for whichever class of that name agrees, the reference's own class first.

    Args:
        labels: the served top-K, best first (K >= 1, at most ``len(reference)``).
        reference: the reference's score of every class, FP32/FP64 ``[classes]``: logits,
            log-probabilities or probabilities (only differences matter; ``tie`` is in the
            same unit).
        names: class names by index (``len(reference)`` of them).
        tie: the largest reference-score gap at which two classes may trade ranks.

    Returns:
        ``(classes, problems)``: the class index each label stands for (-1 where none
        agrees), and one line per rank that disagrees beyond near-ties, or per class
        served twice; no problems means the top-K agrees.
    """
    order = np.argsort(-np.asarray(reference), kind="stable")[: len(labels)]
    by_name: dict[str, list[int]] = {}
    for index, name in enumerate(names):
        by_name.setdefault(name, []).append(index)
    classes: list[int] = []
    problems: list[str] = []
    for rank, (label, want) in enumerate(zip(labels, order, strict=True), 1):
        candidates = sorted(by_name.get(label, []), key=lambda c: (c != want, c))
        agreeing = [c for c in candidates if abs(reference[c] - reference[want]) <= tie]
        classes.append(agreeing[0] if agreeing else -1)
        if not agreeing:
            served = ", ".join(f"{c}: {reference[c]:.6g}" for c in candidates) or "no class"
            problems.append(
                f"rank {rank}: {label!r} ({served}) where the reference has {names[want]!r} "
                f"({want}: {reference[want]:.6g}), beyond a tie of {tie}"
            )
    repeated = {c for c in classes if c >= 0 and classes.count(c) > 1}
    problems += [f"class {c} ({names[c]!r}) served twice" for c in sorted(repeated)]
    return classes, problems


def score_problems(
    scores: Sequence[float], classes: Sequence[int], probabilities: np.ndarray, atol: float
) -> list[str]:
    """Served probabilities farther than ``atol`` from the reference's for the same class.

    Args:
        scores: the served probabilities, best first.
        classes: the class each stands for (:func:`match_top_k`; -1 is skipped, its rank is
            already a problem there).
        probabilities: the reference's probability of every class, ``[classes]``.
        atol: the largest absolute difference allowed.

    Returns:
        One line per score out of tolerance, or per rank that is not in descending order.
    """
    problems = [
        f"rank {rank}: served {score:.6g}, reference {probabilities[c]:.6g} (class {c}), "
        f"beyond {atol}"
        for rank, (score, c) in enumerate(zip(scores, classes, strict=True), 1)
        if c >= 0 and abs(score - probabilities[c]) > atol
    ]
    problems += [
        f"rank {rank + 1}: {scores[rank]:.6g} after {scores[rank - 1]:.6g} (not descending)"
        for rank in range(1, len(scores))
        if scores[rank] > scores[rank - 1]
    ]
    return problems
