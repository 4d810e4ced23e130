"""Triton's own per-model figures over a window, from its metrics endpoint: requests, failures,
and latency, for comparing a canary with the model it may replace.

``nv_inference_request_success`` / ``nv_inference_request_failure`` are counters: the window's
figures are differences of two snapshots. The p50 and p99 are Triton's own summary
(``nv_inference_request_summary_us{quantile="0.5"|"0.99"}``, with ``--metrics-config
summary_latencies=true`` and the quantiles the launcher sets): a sliding window of its own, read
at each snapshot; the window's p50 and p99 are the largest read. Triton 2.51 counts each failed
request of an ensemble twice in ``nv_inference_request_failure``
(docs/operations/monitoring.md), so an ensemble's failures are halved here.
"""

from __future__ import annotations

import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from tritonrepo_client.connection import ClientError

QUANTILES = {"0.5": "p50_us", "0.99": "p99_us"}  # the summary's quantiles read, by label


@dataclass
class ModelFigures:
    """A model's counters at one moment: ``success``, ``failure`` (requests), ``p50_us`` and
    ``p99_us`` (the summary's 0.5 and 0.99 quantiles, µs; None when it has none)."""

    success: float = 0.0
    failure: float = 0.0
    p50_us: float | None = None
    p99_us: float | None = None


def samples(metrics_url: str, timeout_s: float = 10.0) -> list[tuple[str, dict[str, str], float]]:
    """Every sample of Triton's metrics endpoint at ``metrics_url`` (``host:port``):
    ``(name, labels, value)``, a counter's name without the ``_total`` that
    prometheus_client's parser adds to its samples.

    Raises:
        ClientError: the metrics endpoint does not answer.
    """
    try:
        with urllib.request.urlopen(f"http://{metrics_url}/metrics", timeout=timeout_s) as r:
            text = r.read().decode()
    except OSError as exc:
        raise ClientError(f"cannot read Triton's metrics at {metrics_url}: {exc}") from exc
    return [
        (s.name.removesuffix("_total"), s.labels, s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def snapshot(metrics_url: str, timeout_s: float = 10.0) -> dict[str, ModelFigures]:
    """Every model's figures now, summed over versions.

    Raises:
        ClientError: the metrics endpoint does not answer.
    """
    figures: dict[str, ModelFigures] = defaultdict(ModelFigures)
    for name, labels, value in samples(metrics_url, timeout_s):
        model = labels.get("model")
        if model is None:
            continue
        if name == "nv_inference_request_success":
            figures[model].success += value
        elif name == "nv_inference_request_failure":
            figures[model].failure += value
        elif (
            name == "nv_inference_request_summary_us"
            and labels.get("quantile") in QUANTILES
            and value == value  # NaN: no request in the summary's window
        ):
            attribute = QUANTILES[labels["quantile"]]
            old = getattr(figures[model], attribute)
            setattr(figures[model], attribute, value if old is None else max(old, value))
    return dict(figures)


@dataclass
class Window:
    """Figures of a set of models between a first and a last snapshot."""

    start: dict[str, ModelFigures]
    last: dict[str, ModelFigures] = field(default_factory=dict)
    worst_p50_us: dict[str, float] = field(default_factory=dict)
    worst_p99_us: dict[str, float] = field(default_factory=dict)

    def add(self, now: dict[str, ModelFigures]) -> None:
        """Take a later snapshot (its p50s and p99s count towards the window's worst)."""
        self.last = now
        for model, f in now.items():
            if f.p50_us is not None:
                self.worst_p50_us[model] = max(self.worst_p50_us.get(model, 0.0), f.p50_us)
            if f.p99_us is not None:
                self.worst_p99_us[model] = max(self.worst_p99_us.get(model, 0.0), f.p99_us)

    def requests(self, model: str, ensemble: bool) -> tuple[float, float]:
        """``(requests, failed)`` of ``model`` in the window (an ensemble's failures halved)."""
        a, b = self.start.get(model, ModelFigures()), self.last.get(model, ModelFigures())
        failed = (b.failure - a.failure) / (2 if ensemble else 1)
        return (b.success - a.success) + failed, failed
