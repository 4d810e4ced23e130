"""Reference profiles of a pipeline's input features, and the population stability index.

A *feature* is one number per served item computed from a request's inputs (a text's length in
tokens, a user's history length, an image's mean intensity). ``make artifacts`` computes the
features of the pipeline's reference data (training or calibration data) and records, per
feature, bin edges and the share of the reference in each bin: a :class:`Profile`, written as
``model_repository/<pipeline>/drift_profile.json``. The serving step counts live items per bin
(:mod:`tritonrepo.step.drift`), and Prometheus compares the two shares with the population
stability index (``deploy/prometheus/alerts.yml``, ``pipeline_feature:tritonrepo_feature_psi``).

Bins: the reference's quantiles at 1/B, ..., (B-1)/B (B = ``bins``, default 10), or, for a
feature with at most B distinct reference values, the midpoints between them; plus the reference
minimum and the next float above its maximum as outer edges. Bin 0 holds values below the
reference's range and the last bin values above it: their reference share is 0, so mass that
moves outside what the reference ever showed (ids out of vocabulary, timestamps shifted by
hours) weighs fully in the index.

PSI (Siddiqi, *Credit Risk Scorecards*, Wiley 2006, ch. 8; its statistical properties: Yurdakul,
*Statistical Properties of Population Stability Index*, Western Michigan University, 2018)::

    PSI = sum_i (a_i - e_i) * ln(a_i / e_i)

over the bins, with ``a_i`` the live share and ``e_i`` the reference share, each raised to at
least :data:`SHARE_FLOOR` so that an empty bin counts and the logarithm stays finite. Siddiqi's
reading: below 0.1 no significant shift, 0.1 to 0.25 a moderate one, above 0.25 a significant
one (:data:`PSI_ALERT`).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

PROFILE_FILE = "drift_profile.json"  # in the pipeline's (ensemble's) model folder
DEFAULT_BINS = 10
# Smallest share a bin counts with in the index: an empty bin (0) would make ln(a/e) infinite.
# 1e-4 = one item in 10,000; the alert rules use the same floor.
SHARE_FLOOR = 1e-4
PSI_ALERT = 0.25  # Siddiqi (2006): above 0.25, a significant shift


class ProfileError(ValueError):
    """A profile file or a feature's values cannot make a profile (the message says which)."""


@dataclass(frozen=True)
class FeatureProfile:
    """One feature's reference distribution.

    Attributes:
        edges: ascending bin edges (a value v falls in bin ``#{edges <= v}``), so there are
            ``len(edges) + 1`` bins; bin 0 is below the reference's minimum, the last above its
            maximum.
        shares: the reference's share of items in each bin (sums to 1; the outer bins 0).
        count: reference items the shares come from.
        doc: what the feature measures, with its unit.
    """

    edges: tuple[float, ...]
    shares: tuple[float, ...]
    count: int
    doc: str = ""

    def bins(self, values: np.ndarray) -> np.ndarray:
        """The bin of each value (INT64, same length as ``values``); NaN falls in the last
        bin."""
        values = np.asarray(values, dtype=np.float64).reshape(-1)
        index = np.searchsorted(self.edge_array, values, side="right")
        index[np.isnan(values)] = len(self.edges)
        return index

    @functools.cached_property
    def edge_array(self) -> np.ndarray:
        """``edges`` as FP64 ``[len(edges)]``, made once (a request counts with it)."""
        return np.asarray(self.edges, dtype=np.float64)

    def counts(self, values: np.ndarray) -> np.ndarray:
        """Items per bin (INT64 ``[len(edges) + 1]``)."""
        return np.bincount(self.bins(values), minlength=len(self.edges) + 1)

    def upper(self, bin_index: int) -> str:
        """The bin's upper edge as text (``"+Inf"`` for the last): the ``upper`` label."""
        return "+Inf" if bin_index >= len(self.edges) else repr(float(self.edges[bin_index]))


@dataclass(frozen=True)
class Profile:
    """Every monitored feature of one pipeline (``features``: name -> profile) and where the
    reference came from (``reference``: the function, ``module:function``)."""

    pipeline: str
    reference: str
    features: Mapping[str, FeatureProfile]

    def to_json(self) -> str:
        """The file's text (stable: sorted keys, so an unchanged profile rewrites identically)."""
        body = {
            "pipeline": self.pipeline,
            "reference": self.reference,
            "features": {
                name: {
                    "doc": f.doc,
                    "count": f.count,
                    "edges": list(f.edges),
                    "shares": list(f.shares),
                }
                for name, f in self.features.items()
            },
        }
        return json.dumps(body, indent=1, sort_keys=True) + "\n"


def edges_of(values: np.ndarray, bins: int = DEFAULT_BINS) -> tuple[float, ...]:
    """Bin edges for a reference sample (the module docstring says how).

    Raises:
        ProfileError: no finite value, or ``bins`` < 2.
    """
    if bins < 2:
        raise ProfileError(f"bins = {bins}: give 2 or more")
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    values = values[np.isfinite(values)]
    if values.size == 0:
        raise ProfileError("no finite reference value")
    distinct = np.unique(values)
    if distinct.size <= bins:
        inner = (distinct[:-1] + distinct[1:]) / 2
    else:
        inner = np.unique(np.quantile(values, np.arange(1, bins) / bins))
        inner = inner[(inner > distinct[0]) & (inner <= distinct[-1])]
    top = np.nextafter(distinct[-1], np.inf)
    edges = np.unique(np.concatenate([[distinct[0]], inner, [top]]))
    return tuple(float(e) for e in edges)


def feature_profile(values: np.ndarray, bins: int = DEFAULT_BINS, doc: str = "") -> FeatureProfile:
    """The profile of one feature's reference values.

    Raises:
        ProfileError: as :func:`edges_of`.
    """
    values = np.asarray(values, dtype=np.float64).reshape(-1)
    edges = edges_of(values, bins)
    profile = FeatureProfile(edges, (), int(values.size), doc)
    counts = profile.counts(values)
    shares = tuple(float(c) / values.size for c in counts)
    return FeatureProfile(edges, shares, int(values.size), doc)


def read_profile(path: Path) -> Profile:
    """A profile file (:meth:`Profile.to_json`).

    Raises:
        ProfileError: not JSON, or a feature's edges and shares do not fit together.
        OSError: the file cannot be read.
    """
    try:
        body = json.loads(Path(path).read_text())
        features = {}
        for name, f in body["features"].items():
            edges, shares = tuple(f["edges"]), tuple(f["shares"])
            if len(shares) != len(edges) + 1 or list(edges) != sorted(edges):
                raise ProfileError(f"{path}: feature {name!r}: {len(edges)} ascending edges "
                                   f"need {len(edges) + 1} shares, not {len(shares)}")  # fmt: skip
            features[name] = FeatureProfile(edges, shares, int(f["count"]), f.get("doc", ""))
        return Profile(body["pipeline"], body.get("reference", ""), features)
    except (ValueError, KeyError, TypeError) as exc:
        if isinstance(exc, ProfileError):
            raise
        raise ProfileError(f"{path}: not a drift profile ({exc!r})") from exc


def psi(expected: np.ndarray, actual: np.ndarray, floor: float = SHARE_FLOOR) -> float:
    """Population stability index between two share vectors of the same bins (each summing to
    1; the module docstring gives the formula and its source). NaN when ``actual`` is all 0."""
    e = np.maximum(np.asarray(expected, dtype=np.float64), floor)
    a = np.asarray(actual, dtype=np.float64)
    if a.sum() <= 0:
        return math.nan
    a = np.maximum(a / a.sum(), floor)
    return float(np.sum((a - e) * np.log(a / e)))
