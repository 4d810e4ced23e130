"""Reference profiles and the PSI (tritonrepo.step.feature_profile), the default features
(tritonrepo.step.drift.by_dtype) and the [drift] table of descriptions."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tritonrepo.description import DescriptionError, load
from tritonrepo.step.drift import FeatureContext, by_dtype, parse_parameter
from tritonrepo.step.feature_profile import (
    ProfileError,
    edges_of,
    feature_profile,
    psi,
    read_profile,
)

ROOT = Path(__file__).resolve().parents[2]
values = st.lists(
    st.floats(min_value=-1e6, max_value=1e6, allow_nan=False), min_size=1, max_size=300
)


@settings(max_examples=200, deadline=None)
@given(values, st.integers(min_value=2, max_value=20))
def test_every_reference_value_is_in_a_bin_between_its_edges(sample, bins):
    """Shares sum to 1; the outer bins (below the minimum, above the maximum) are empty; a
    value lands in bin i exactly when edges[i-1] <= v < edges[i]."""
    reference = np.array(sample)
    profile = feature_profile(reference, bins)
    assert math.isclose(sum(profile.shares), 1.0)
    assert profile.shares[0] == 0 and profile.shares[-1] == 0
    assert len(profile.shares) == len(profile.edges) + 1 <= bins + 3
    edges = np.array(profile.edges)
    for v, b in zip(reference, profile.bins(reference), strict=True):
        assert edges[b - 1] <= v < (edges[b] if b < len(edges) else np.inf)
    assert profile.bins(np.array([reference.min() - 1]))[0] == 0
    assert profile.bins(np.array([reference.max() + 1]))[0] == len(edges)


def test_few_distinct_values_get_a_bin_each():
    """A 0/1 feature: bins below 0, {0}, {1}, above 1; rates that were always 0 get a bin for
    0 and one for anything above it."""
    flags = feature_profile(np.array([0, 0, 0, 1]), 10)
    assert flags.shares == (0.0, 0.75, 0.25, 0.0)
    rates = feature_profile(np.zeros(100), 10)
    assert rates.shares == (0.0, 1.0, 0.0)
    assert rates.bins(np.array([0.0, 1e-9, 0.5])).tolist() == [1, 2, 2]


def test_deciles_of_a_continuous_reference():
    reference = np.random.default_rng(0).normal(size=10_000)
    shares = np.array(feature_profile(reference, 10).shares[1:-1])
    assert np.allclose(shares, 0.1, atol=0.002), shares


def test_psi_by_the_formula_and_its_floor():
    """PSI = sum (a - e) ln(a / e) (Siddiqi 2006), shares floored at 1e-4."""
    expected = (0.25 - 0.5) * math.log(0.25 / 0.5) + (0.75 - 0.5) * math.log(0.75 / 0.5)
    assert psi([0.5, 0.5], [25, 75]) == pytest.approx(expected)  # counts are normalised
    assert psi([0.5, 0.5], [1, 1]) == 0
    assert psi([1.0, 0.0], [0.0, 1.0]) == pytest.approx(
        (1e-4 - 1) * math.log(1e-4) + (1 - 1e-4) * math.log(1 / 1e-4)
    )
    assert math.isnan(psi([0.5, 0.5], [0, 0]))


def test_no_finite_value_or_one_bin_is_refused(tmp_path):
    with pytest.raises(ProfileError, match="no finite"):
        edges_of(np.array([np.nan, np.inf]))
    with pytest.raises(ProfileError, match="bins = 1"):
        edges_of(np.array([1.0, 2.0]), 1)
    bad = tmp_path / "drift_profile.json"
    bad.write_text(
        '{"pipeline": "p", "features": {"f": {"edges": [1, 2], "shares": [1], "count": 1}}}'
    )
    with pytest.raises(ProfileError, match="2 ascending edges need 3 shares"):
        read_profile(bad)


def test_default_features_follow_the_input_dtypes():
    context = FeatureContext(ROOT / "model_repository", batched=True)
    features = by_dtype(
        {
            "TEXT": np.array([[b"abc"], [b"hello"]], dtype=object),
            "ROW": np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32),
            "IMAGE": np.arange(2 * 40, dtype=np.uint8).reshape(2, 40),
        },
        context,
    )
    assert features["TEXT.bytes"].tolist() == [3, 5]
    assert features["ROW[1]"].tolist() == [2.0, 4.0]
    assert features["IMAGE.mean"].tolist() == [19.5, 59.5]
    one = by_dtype({"HISTORY": np.array([1, 2, 3])}, FeatureContext(ROOT, batched=False))
    assert set(one) == {"HISTORY[0]", "HISTORY[1]", "HISTORY[2]"}


def test_drift_parameter_round_trip_and_description_checks(tmp_path):
    pipeline = load(ROOT / "pipelines" / "ctr_ranking" / "pipeline.toml")
    assert parse_parameter(pipeline.drift_parameter()["tritonrepo_drift"]) == (
        "ctr_ranking",
        "tritonrepo.ctr.drift:features",
    )
    source = (ROOT / "pipelines" / "breast_cancer" / "pipeline.toml").read_text()
    broken = source.replace(
        '[drift]\nreference = "pipelines.breast_cancer.model:training_requests"',
        '[drift]\nreference = "no colon"\nbins = 1\nsample = 3',
    )
    assert broken != source
    path = tmp_path / "breast_cancer" / "pipeline.toml"
    path.parent.mkdir()
    path.write_text(broken)
    with pytest.raises(DescriptionError) as info:
        load(path)
    text = str(info.value)
    assert "drift.reference: 'no colon' is not 'package.module:function'" in text
    assert "drift.bins: 1: give 2 to 50" in text
    assert "sample" in text
