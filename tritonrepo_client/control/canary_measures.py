"""What a canary's shadow copies compare, output by output, and what each comparison must show.

The guard scores every row of both answers with a measure (``deploy/guard/routes.js``,
``scores``), and its summary gives the distribution of each measure's scores over the window's
rows (``rows``, ``mean``, quantiles ``p01`` ... ``p99``). A :class:`Measure` says which output
and measure, and how its distribution is judged: a **share** of rows that agree (exact labels,
the same argmax, the same decision at a threshold) or a **quantile** of a similarity (the 5th
percentile of the rows' cosine or overlap), never the single worst row: one hard row of a
legitimately retrained model must not roll it back, and a constant model must not pass because
its median looks fine.

Without a declaration (the description's ``[canary]``), every output is compared with a measure
chosen from its datatype and shape (:func:`default_measures`):

* text, booleans and integers: ``exact`` per row (labels, class ids), or ``overlap`` for a
  one-dimensional output of an unbatched model (a ranked list of ids);
* floats of 16 values or more per row (embeddings): ``cosine``;
* floats of 2 to 15 values per row (class scores): ``argmax``, and ``abs_diff`` reported;
* one float per row (a probability, a score): ``decision`` at 0.5, and ``abs_diff`` reported.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# How many rows of the compared answers must agree, for the share measures, by default: a
# retrained version changes a few decisions; a constant or shuffled one changes a third to a
# half of them.
MIN_SHARE = 0.90
MIN_COSINE_P05 = 0.99  # the 5th percentile row's cosine (an INT8 encoder keeps 0.99)
MIN_OVERLAP_P05 = 0.80  # the 5th percentile row's overlap of ranked ids
EMBEDDING_WIDTH = 16  # float values per row from which an output is compared by cosine
SHARE_MEASURES = ("exact", "argmax", "decision")
QUANTILE_MEASURES = ("cosine", "overlap")
MEASURES = (*SHARE_MEASURES, *QUANTILE_MEASURES, "abs_diff")
FLOAT_TYPES = ("FP16", "BF16", "FP32", "FP64")


@dataclass(frozen=True)
class Measure:
    """One output's comparison.

    Attributes:
        output: the output's name.
        measure: ``exact``, ``argmax``, ``decision``, ``cosine``, ``overlap`` or ``abs_diff``
            (the guard's, per row).
        limit: the smallest share of agreeing rows (``exact``, ``argmax``, ``decision``), the
            smallest 5th percentile (``cosine``, ``overlap``) or the largest 95th percentile
            (``abs_diff``) the canary may show; None: reported, not judged.
        threshold: ``decision``'s threshold (a value at or above it is the positive side).
    """

    output: str
    measure: str
    limit: float | None = None
    threshold: float | None = None

    def __post_init__(self) -> None:
        """Raises ValueError for an unknown measure or a limit outside its range."""
        if self.measure not in MEASURES:
            raise ValueError(f"{self.output}: measure {self.measure!r} is not one of {MEASURES}")
        if self.limit is not None and not math.isfinite(self.limit):
            raise ValueError(f"{self.output}: limit {self.limit!r} is not a number")
        bounded = self.measure != "abs_diff"
        if self.limit is not None and bounded and not -1 <= self.limit <= 1:
            raise ValueError(f"{self.output}: a {self.measure} limit is -1 to 1, not {self.limit}")

    @property
    def key(self) -> str:
        """The guard's name of the scores: ``<output>:<measure>``."""
        return f"{self.output}:{self.measure}"

    def route_spec(self) -> dict[str, Any]:
        """What the guard's route takes: ``{"output", "measure"[, "threshold"]}``."""
        spec: dict[str, Any] = {"output": self.output, "measure": self.measure}
        if self.threshold is not None:
            spec["threshold"] = self.threshold
        return spec

    def statistic(self) -> str:
        """The figure of the distribution that is judged: ``mean`` (the share of agreeing
        rows), ``p05`` or ``p95``."""
        if self.measure in SHARE_MEASURES:
            return "mean"
        return "p05" if self.measure in QUANTILE_MEASURES else "p95"

    def describe(self, distribution: Mapping[str, Any] | None) -> str:
        """One phrase: what was compared and what it showed, e.g. ``PROBABILITY decision at
        0.5 agrees on 97.1 % of 312 rows``."""
        rows = int((distribution or {}).get("rows") or 0)
        value = (distribution or {}).get(self.statistic())
        what = f"{self.output} {self.measure}"
        if self.measure == "decision":
            what += f" at {self.threshold if self.threshold is not None else 0.5:g}"
        if value is None or not rows:
            return f"{what}: no row compared"
        if self.measure in SHARE_MEASURES:
            shown = f"agrees on {value:.1%} of {rows} rows"
        elif self.measure == "abs_diff":
            shown = f"p95 {value:.4g} over {rows} rows"
        else:
            shown = f"p05 {value:.4f} over {rows} rows"
        if self.limit is not None:
            sign = "≤" if self.measure == "abs_diff" else "≥"
            limit = f"{self.limit:.0%}" if self.measure in SHARE_MEASURES else f"{self.limit:g}"
            shown += f" (required {sign} {limit})"
        return f"{what} {shown}"

    def failed(self, distribution: Mapping[str, Any] | None) -> bool:
        """Whether the canary's rows break the limit (False without a limit or a row)."""
        if self.limit is None or not distribution or not distribution.get("rows"):
            return False
        value = distribution.get(self.statistic())
        if value is None:
            return False
        return value > self.limit if self.measure == "abs_diff" else value < self.limit


def _width(shape: Sequence[int], batched: bool) -> int:
    """Values per row of an output of ``shape`` (the metadata's, batch dim first when
    ``batched``); a dynamic dim counts as many."""
    dims = list(shape[1:] if batched else shape[1:] if len(shape) > 1 else shape)
    width = 1
    for d in dims:
        width *= d if d > 0 else EMBEDDING_WIDTH
    return width


def default_measures(outputs: Iterable[Mapping[str, Any]], batched: bool) -> list[Measure]:
    """The measures of every output (module docstring), from the model's metadata outputs
    (``{"name", "datatype", "shape"}``; ``batched``: the model's ``max_batch_size`` > 0)."""
    out = []
    for o in outputs:
        name, datatype, shape = o["name"], o["datatype"], [int(d) for d in o.get("shape", [])]
        if datatype not in FLOAT_TYPES:
            ranked = not batched and len(shape) == 1
            measure = "overlap" if ranked else "exact"
            limit = MIN_OVERLAP_P05 if ranked else MIN_SHARE
            out.append(Measure(name, measure, limit))
            continue
        width = _width(shape, batched)
        if width >= EMBEDDING_WIDTH:
            out.append(Measure(name, "cosine", MIN_COSINE_P05))
        elif width > 1:
            out += [Measure(name, "argmax", MIN_SHARE), Measure(name, "abs_diff")]
        else:
            out += [Measure(name, "decision", MIN_SHARE, 0.5), Measure(name, "abs_diff")]
    return out


def with_declared(measures: list[Measure], declared: Mapping[str, Any] | None) -> list[Measure]:
    """``measures`` with the output a pipeline's ``[canary]`` declares (``{"output", "measure",
    "min"}``) compared its way instead.

    Raises:
        ValueError: the declaration names a measure the guard does not have.
    """
    if not declared:
        return measures
    output = declared["output"]
    mine = Measure(output, declared["measure"], declared.get("min"), declared.get("threshold"))
    return [m for m in measures if m.output != output] + [mine]


def with_min_agreement(measures: list[Measure], minimum: float | None) -> list[Measure]:
    """``measures`` whose share or quantile limit is ``minimum`` (``--min-agreement``).

    Raises:
        ValueError: ``minimum`` is given and no measure takes it (every output is reported
            only): the flag would do nothing.
    """
    if minimum is None:
        return measures
    taking = [m for m in measures if m.measure in (*SHARE_MEASURES, *QUANTILE_MEASURES)]
    if not taking:
        raise ValueError(
            "--min-agreement: no output of the pipeline is compared by a share or a quantile "
            "(declare one in its [canary] table)"
        )
    return [
        Measure(m.output, m.measure, minimum, m.threshold) if m in taking else m for m in measures
    ]
