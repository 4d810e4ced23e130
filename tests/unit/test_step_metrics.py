"""The per-step error counters (tritonrepo.step.metrics) without a server: which kind each
error answer is counted under, and that every series exists from the start."""

from __future__ import annotations

import os
from typing import ClassVar

import numpy as np
import pytest

from tritonrepo.ctr.features import check_candidates, check_history
from tritonrepo.step.errors import InvalidRequest, OverLimit
from tritonrepo.step.metrics import ERROR_KINDS, StepErrorCounters, error_kind
from tritonrepo.text.tokenization import decode_texts


class _Family:
    """Records what the Python backend's MetricFamily would be asked (the stub API's shape)."""

    COUNTER, GAUGE = 0, 1
    created: ClassVar[list[_Family]] = []

    def __init__(self, name: str, description: str, kind: int) -> None:
        self.name, self.kind, self.metrics = name, kind, []
        _Family.created.append(self)

    def Metric(self, labels: dict[str, str]) -> _Metric:
        metric = _Metric(labels)
        self.metrics.append(metric)
        return metric


class _Metric:
    def __init__(self, labels: dict[str, str]) -> None:
        self.labels, self.value = labels, 0.0

    def increment(self, value: float) -> None:
        self.value += value


class _PbUtils:
    MetricFamily = _Family


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (OverLimit("too big"), "over_limit"),
        (InvalidRequest("bad"), "invalid_input"),
        (RuntimeError("ctr_model: stub died"), "internal"),
        (KeyError("x"), "internal"),
    ],
)
def test_each_error_has_its_kind(error: BaseException, kind: str) -> None:
    assert error_kind(error) == kind


def test_limits_raise_over_limit_and_other_mistakes_invalid_input() -> None:
    with pytest.raises(OverLimit):
        decode_texts(np.array([b"x" * 70_000], dtype=object), "TEXT", max_bytes=65_536)
    with pytest.raises(OverLimit):
        check_candidates(np.arange(1, 514))
    with pytest.raises(OverLimit):
        check_history(np.ones(4097, dtype=np.int64))
    for mistake in (
        lambda: decode_texts(np.array([b"\xff"], dtype=object), "TEXT", max_bytes=65_536),
        lambda: check_candidates(np.array([], dtype=np.int64)),
    ):
        with pytest.raises(InvalidRequest) as caught:
            mistake()
        assert error_kind(caught.value) == "invalid_input"


def test_every_kind_is_a_series_at_zero_and_counts_apart() -> None:
    _Family.created.clear()
    counters = StepErrorCounters(_PbUtils, "text_embedding_tokenize", "1", "tok_0_0")
    (family,) = _Family.created
    assert family.name == "tritonrepo_step_errors_total"
    assert family.kind == _Family.COUNTER
    by_kind = {m.labels["kind"]: m for m in family.metrics}
    assert sorted(by_kind) == sorted(ERROR_KINDS)
    assert all(m.value == 0 for m in family.metrics)
    assert {m.labels["instance"] for m in family.metrics} == {"tok_0_0"}
    # a stub's own series: a reloaded instance of the same name gets new ones
    assert {m.labels["stub_pid"] for m in family.metrics} == {str(os.getpid())}
    counters.count("over_limit")
    counters.count("over_limit")
    counters.count("internal")
    assert by_kind["over_limit"].value == 2
    assert by_kind["internal"].value == 1
    assert by_kind["invalid_input"].value == 0


def test_finalize_drops_every_metric_so_the_backend_deletes_the_series() -> None:
    """The Python backend deletes a custom metric from Triton when its Python object goes; an
    object still alive when the stub exits never reaches Triton (tritonrepo.step.metrics)."""
    import weakref

    from tritonrepo.step.python_step import PythonStep

    _Family.created.clear()
    step = PythonStep()
    step.error_counters = StepErrorCounters(_PbUtils, "m", "1", "m_0_0")
    family = weakref.ref(_Family.created.pop())
    metrics = [weakref.ref(m) for m in family().metrics]
    assert len(metrics) == len(ERROR_KINDS)
    step.finalize()
    assert family() is None and all(m() is None for m in metrics)
    step.error_counters.count("internal")  # after finalize: nothing to count, nothing fails


def test_without_the_metrics_api_nothing_is_counted_and_nothing_fails() -> None:
    StepErrorCounters(object(), "m", "1", "i").count("internal")


def test_parse_priority_takes_the_two_levels_and_refuses_others() -> None:
    from tritonrepo_client.scheduling import BULK, REALTIME, parse_priority

    assert parse_priority("bulk") == BULK
    assert parse_priority("Realtime") == REALTIME
    assert parse_priority("0") == 0
    for bad in ("3", "7", "-1", "high", ""):
        with pytest.raises(ValueError, match=r"realtime, bulk or 0\.\.2"):
            parse_priority(bad)
