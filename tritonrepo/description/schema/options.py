"""The optional tables of a single-core description, as types, each with the config parameter it
becomes: ``[openai_embeddings]`` (:class:`OpenAiEmbeddings`), ``[canary]`` (:class:`CanarySpec`)
and ``[drift]`` (:class:`DriftSpec`). Types only: :mod:`tritonrepo.description.parse.options`
reads them.

::

    [canary]
    output = "EMBEDDING"   # a response tensor of the pipeline
    measure = "cosine"     # cosine (each row's), overlap (of the ids listed) or exact
    min = 0.99             # the smallest agreement a compared answer may have

    [drift]
    features = "pipelines.my_model.drift:features"    # optional; default: from the input dtypes
    reference = "pipelines.my_model.drift:reference"  # optional; default: the [samples] function
    bins = 10                                         # optional; reference quantiles per feature
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

CANARY_PARAMETER = "tritonrepo_canary"  # read by tritonrepo_client.control.canary
MEASURES = ("cosine", "overlap", "exact")
DRIFT_PARAMETER = "tritonrepo_drift"  # read by tritonrepo.step.drift (the same name there)
MIN_BINS, MAX_BINS = 2, 50
DEFAULT_BINS = 10


def _compact(value: Any) -> str:
    """``value`` as compact JSON (a config parameter's string)."""
    return json.dumps(value, separators=(",", ":"))


@dataclass(frozen=True)
class OpenAiEmbeddings:
    """``[openai_embeddings]``: the pipeline also answers OpenAI's ``POST /v1/embeddings`` on the
    HTTP port, through the HTTP guard (``deploy/guard/openai_embeddings.js``).

    Attributes:
        input: the BYTES ``[1]`` input that takes one text.
        output: the FP32 ``[d]`` output: the text's embedding.
        tokens: an INT32/INT64 ``[1]`` output counting the text's tokens (OpenAI's ``usage``);
            None: usage is reported as 0 tokens.
    """

    input: str
    output: str
    tokens: str | None = None

    def parameter(self, dimensions: int) -> str:
        """The served configs' ``tritonrepo_openai_embeddings`` parameter (compact JSON)."""
        fields = {"input": self.input, "output": self.output, "tokens": self.tokens,
                  "dimensions": dimensions}  # fmt: skip
        return _compact(fields)


@dataclass(frozen=True)
class CanarySpec:
    """``[canary]``: ``output`` compared by ``measure``, each answer at least ``min``; how a
    canary's answers are compared with the serving version's (``tritonrepo-client canary``, the
    HTTP guard's shadow copies)."""

    output: str
    measure: str
    min: float

    def parameter(self) -> dict[str, str]:
        """``{"tritonrepo_canary": JSON}`` for the ensemble's config."""
        value = {"output": self.output, "measure": self.measure, "min": self.min}
        return {CANARY_PARAMETER: _compact(value)}


@dataclass(frozen=True)
class DriftSpec:
    """``[drift]``: which input features the pipeline's serving step counts
    (:mod:`tritonrepo.step.drift`) and what reference ``make artifacts`` profiles them on
    (:mod:`builders.pipeline.drift_profile`).

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
        return {DRIFT_PARAMETER: _compact(value)}
