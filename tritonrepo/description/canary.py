"""The ``[canary]`` table of a description: how a canary's answers are compared with the
serving version's (``tritonrepo-client canary``, the HTTP guard's shadow copies)::

    [canary]
    output = "EMBEDDING"   # a response tensor of the pipeline
    measure = "cosine"     # cosine (each row's), overlap (of the ids listed) or exact
    min = 0.99             # the smallest agreement a compared answer may have
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tritonrepo.description.reader import _Reader

CANARY_PARAMETER = "tritonrepo_canary"  # read by tritonrepo_client.control.canary
MEASURES = ("cosine", "overlap", "exact")


@dataclass(frozen=True)
class CanarySpec:
    """``[canary]``: ``output`` compared by ``measure``, each answer at least ``min``."""

    output: str
    measure: str
    min: float

    def parameter(self) -> dict[str, str]:
        """``{"tritonrepo_canary": JSON}`` for the ensemble's config."""
        value = {"output": self.output, "measure": self.measure, "min": self.min}
        return {CANARY_PARAMETER: json.dumps(value, separators=(",", ":"))}


def parse_canary(r: _Reader, raw: Any, outputs: list[str]) -> CanarySpec | None:
    """``[canary]`` checked against the pipeline's outputs."""
    where = "canary"
    raw = r.table(raw, where, ("output", "measure", "min"),
                  "output = 'EMBEDDING', measure = 'cosine', min = 0.99")  # fmt: skip
    if raw is None:
        return None
    output = r.get(raw, "output", where, str, "")
    measure = r.get(raw, "measure", where, str, "cosine")
    low = r.get(raw, "min", where, float, 0.0)
    if output not in outputs:
        r.problem(f"{where}.output", f"{output!r} is not a response tensor: {outputs}")
    if measure not in MEASURES:
        r.problem(f"{where}.measure", f"{measure!r}: give one of {', '.join(MEASURES)}")
    if not 0.0 <= low <= 1.0:
        r.problem(f"{where}.min", f"{low}: an agreement is 0 to 1")
    return CanarySpec(output, measure, low)
