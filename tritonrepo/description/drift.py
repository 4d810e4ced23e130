"""The ``[drift]`` table of a description: which input features the pipeline's serving step
counts (:mod:`tritonrepo.step.drift`) and what reference ``make artifacts`` profiles them on
(:mod:`builders.pipeline.drift_profile`)::

    [drift]
    features = "pipelines.my_model.drift:features"    # optional; default: from the input dtypes
    reference = "pipelines.my_model.drift:reference"  # optional; default: the [samples] function
    bins = 10                                         # optional; reference quantiles per feature
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tritonrepo.description.reader import _Reader
from tritonrepo.description.schema import REF_PATTERN

DRIFT_PARAMETER = "tritonrepo_drift"  # read by tritonrepo.step.drift (the same name there)
MIN_BINS, MAX_BINS = 2, 50
DEFAULT_BINS = 10


@dataclass(frozen=True)
class DriftSpec:
    """``[drift]``.

    Attributes:
        features: ``module:function(inputs, context) -> {feature: values}``; None: the default,
            one feature per input from its dtype (``tritonrepo.step.drift.by_dtype``).
        reference: ``module:function() -> list of requests`` (each ``{input: array}`` as the
            pipeline receives it): the training or calibration data; None: the samples.
        bins: quantile bins per feature (``tritonrepo.step.feature_profile``).
    """

    features: str | None = None
    reference: str | None = None
    bins: int = DEFAULT_BINS

    def parameter(self, pipeline: str) -> dict[str, str]:
        """``{"tritonrepo_drift": JSON}`` for the model that receives the pipeline's requests."""
        value: dict[str, Any] = {"pipeline": pipeline}
        if self.features:
            value["features"] = self.features
        return {DRIFT_PARAMETER: json.dumps(value, separators=(",", ":"))}


def parse_drift(r: _Reader, raw: Any, samples: str | None, stateful: bool) -> DriftSpec | None:
    """``[drift]`` checked: references well-formed, ``bins`` in range, a reference to profile
    (``reference`` or ``[samples]``), and a stateless pipeline."""
    where = "drift"
    raw = r.table(raw, where, ("features", "reference", "bins"),
                  "features = 'module:function', reference = ...")  # fmt: skip
    if raw is None:
        return None
    spec = DriftSpec(
        features=r.get(raw, "features", where, str, None),
        reference=r.get(raw, "reference", where, str, None),
        bins=r.get(raw, "bins", where, int, DEFAULT_BINS),
    )
    for key in ("features", "reference"):
        ref = getattr(spec, key)
        if ref is not None and not REF_PATTERN.match(ref):
            r.problem(f"{where}.{key}", f"{ref!r} is not 'package.module:function'")
    if not MIN_BINS <= spec.bins <= MAX_BINS:
        r.problem(f"{where}.bins", f"{spec.bins}: give {MIN_BINS} to {MAX_BINS}")
    if spec.reference is None and samples is None:
        r.problem(f"{where}.reference", "is missing and there are no [samples] to profile; "
                  "give reference = 'module:function' (your training data)")  # fmt: skip
    if stateful:
        r.problem(where, "is for stateless pipelines (a session's events are not counted yet)")
    return spec
