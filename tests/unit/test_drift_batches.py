"""A step's drift counts (``tritonrepo.step.drift.FeatureMonitor``) are the same whether the
requests of one execute are counted one by one or joined along the batch dim, which the monitor
does when their inputs agree (one features call per execute instead of one per request).

``pb_utils`` is the Python backend's module inside a stub; here a recording stand-in of its
``MetricFamily`` keeps what the monitor sends, so the counts can be read without a server
(tests/deploy/test_drift.py reads them from a served pipeline's metrics endpoint).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tritonrepo.step.drift import FeatureContext, FeatureMonitor, by_dtype
from tritonrepo.step.feature_profile import Profile, feature_profile

MADE: list[Recorded] = []  # every metric the monitor made, in order


class Recorded:
    """One metric: its family's name, its labels and what was added to it or set."""

    def __init__(self, family: str, labels: dict[str, str]) -> None:
        self.family, self.labels, self.value = family, labels, 0.0

    def increment(self, value: float) -> None:
        self.value += value

    def set(self, value: float) -> None:
        self.value = value


class Family:
    """``pb_utils.MetricFamily``'s interface, recording into :data:`MADE`."""

    COUNTER, GAUGE = "counter", "gauge"

    def __init__(self, name: str, description: str, kind: str) -> None:
        self.name = name

    def Metric(self, labels: dict[str, str]) -> Recorded:
        metric = Recorded(self.name, labels)
        MADE.append(metric)
        return metric


class PbUtils:
    MetricFamily = Family


def monitor(batched: bool = True) -> FeatureMonitor:
    rng = np.random.default_rng(0)
    reference = rng.normal(size=(400, 3))
    features = {f"X[{c}]": feature_profile(reference[:, c]) for c in range(reference.shape[1])}
    profile = Profile(pipeline="toy", reference="toy:reference", features=features)
    MADE.clear()
    return FeatureMonitor(PbUtils, profile, by_dtype, FeatureContext(Path("."), batched),
                          {"model": "toy"})  # fmt: skip


def bin_counts() -> dict[tuple[str, str], float]:
    return {
        (m.labels["feature"], m.labels["bin"]): m.value
        for m in MADE
        if m.family == "tritonrepo_feature_bin_total"
    }


def counted(requests: list[dict[str, Any]], batched: bool = True) -> dict[tuple[str, str], float]:
    m = monitor(batched)
    m.observe(requests)
    m.close()
    return bin_counts()


def one_by_one(requests: list[dict[str, Any]], batched: bool = True) -> dict:
    m = monitor(batched)
    for request in requests:
        m.observe([request])
    m.close()
    return bin_counts()


@pytest.mark.parametrize("rows", [[1, 1, 1], [2, 5, 1, 3]])
def test_joined_requests_count_as_each_request_alone(rows: list[int]) -> None:
    rng = np.random.default_rng(1)
    requests = [{"X": rng.normal(scale=2.0, size=(n, 3)).astype(np.float32)} for n in rows]
    joined = counted(requests)
    assert joined == one_by_one(requests)
    assert sum(v for (f, _), v in joined.items() if f == "X[0]") == sum(rows)
    assert sum(joined.values()) == 3 * sum(rows)


def test_requests_whose_inputs_differ_are_counted_one_by_one() -> None:
    m = monitor()
    rows = [{"X": np.zeros((2, 3), np.float32)}, {"X": np.zeros((1, 3), np.float64)}]
    assert len(m.batches(rows)) == 2
    other = [{"X": np.zeros((2, 3), np.float32)}, {"Y": np.zeros((1, 3), np.float32)}]
    assert len(m.batches(other)) == 2
    assert len(m.batches([rows[0], {"X": np.ones((4, 3), np.float32)}])) == 1
    m.close()


def test_an_unbatched_model_counts_each_request() -> None:
    m = monitor(batched=False)
    requests = [{"X": np.zeros((3,), np.float32)}, {"X": np.ones((3,), np.float32)}]
    assert len(m.batches(requests)) == 2
    m.close()
    assert counted(requests, batched=False) == one_by_one(requests, batched=False)
