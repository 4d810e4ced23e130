"""What a pipeline receives, counted per feature and bin on Triton's metrics endpoint.

The model that receives a pipeline's requests (its preprocess step in the ensemble, or the
one-step model that runs the whole pipeline) carries the config parameter ``tritonrepo_drift``
(:data:`DRIFT_PARAMETER`, JSON ``{"pipeline": name, "features": "module:function"}``, written
by the generator from the description's ``[drift]`` table). For every request it answers, the
step computes the features of the request's inputs and counts each item in the bin of the
pipeline's reference profile (:mod:`tritonrepo.step.feature_profile`,
``model_repository/<pipeline>/drift_profile.json``, made by ``make artifacts``):

``tritonrepo_feature_bin_total{pipeline, feature, bin, upper, model, version, instance, stub_pid}``
    items served per bin (counter; ``bin`` "00", "01", ...; ``upper`` its upper edge);
``tritonrepo_feature_reference_share{pipeline, feature, bin, upper, ...}``
    the reference's share in that bin (gauge, constant);
``tritonrepo_feature_seconds_total{pipeline, model, version, instance, stub_pid}``
    time spent computing and counting features, seconds (counter): the monitoring's own cost.

Prometheus turns them into a drift score per feature (PSI over a window) and an alert
(``deploy/prometheus/alerts.yml``). The per-stub labels are there for the reason
:mod:`tritonrepo.step.metrics` gives (Triton 2.51 shares series with identical labels between
stubs). Counting never fails a request: a features function that raises is logged
(rate-limited) and the request is answered as if it were not monitored.

A features function takes ``(inputs, context)``: the request's inputs as the model received them
(``{name: numpy array}``, with the batch dim when the pipeline batches) and a
:class:`FeatureContext`; it returns ``{feature: values}``, one number per item of the request
(one per request for ``max_batch_size = 0``). :func:`by_dtype` is the default.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tritonrepo.step.feature_profile import PROFILE_FILE, Profile, read_profile
from tritonrepo.step.function_refs import load_function
from tritonrepo.step.metrics import stub_labels

DRIFT_PARAMETER = "tritonrepo_drift"
DEFAULT_FEATURES = "tritonrepo.step.drift:by_dtype"
BINS_METRIC = "tritonrepo_feature_bin_total"
REFERENCE_METRIC = "tritonrepo_feature_reference_share"
SECONDS_METRIC = "tritonrepo_feature_seconds_total"
# Inputs with at most this many numbers per item get one feature per number (a table row's
# columns); larger ones (images, sequences) one feature for their mean.
MAX_COLUMNS = 32
# Counts reach Triton's metrics at most this often, seconds (a thread sends what a quiet
# instance still holds). Each increment of a Python-backend metric is a round trip from the
# stub to Triton (python_backend's Metric::SendIncrementRequest), so counting every request
# directly cost breast_cancer's one-step model, 30 features, 2.7 ms a request: a c=1 p50 of
# 3.2 ms instead of 0.5 ms (make bench-pipelines, 2 cores). A scrape (15 s or more) sees the
# counts at most this late.
FLUSH_INTERVAL_S = 1.0


@dataclass(frozen=True)
class FeatureContext:
    """What a features function may need besides the inputs.

    Attributes:
        repository: the model repository's root (e.g. to read a tokenizer from a step's folder).
        batched: True when inputs have a batch dim (``max_batch_size`` > 0): one value per item.
    """

    repository: Path
    batched: bool


FeatureFunction = Callable[[Mapping[str, np.ndarray], FeatureContext], Mapping[str, Any]]


def by_dtype(inputs: Mapping[str, np.ndarray], context: FeatureContext) -> dict[str, np.ndarray]:
    """Default features, from each input's data type, one value per item:

    * BYTES (object arrays): ``<input>.bytes``, the item's length in bytes (summed over its
      elements);
    * numbers with at most :data:`MAX_COLUMNS` per item: ``<input>[i]``, each column;
    * larger numeric items: ``<input>.mean``, their mean.
    """
    features: dict[str, np.ndarray] = {}
    for name, value in inputs.items():
        array = np.asarray(value)
        items = array.reshape(array.shape[0], -1) if context.batched else array.reshape(1, -1)
        if array.dtype == np.object_:
            lengths = np.vectorize(lambda v: len(v) if isinstance(v, bytes | str) else 0,
                                   otypes=[np.int64])(items)  # fmt: skip
            features[f"{name}.bytes"] = lengths.sum(axis=1)
        elif items.shape[1] <= MAX_COLUMNS:
            for column in range(items.shape[1]):
                features[f"{name}[{column}]"] = items[:, column].astype(np.float64)
        else:
            features[f"{name}.mean"] = items.astype(np.float64).mean(axis=1)
    return features


def host_array(value: Any) -> np.ndarray:
    """A numpy array of ``value``: a ``torch`` tensor (a GPU step's input, on any device) is
    copied to the host."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "detach"):
        return value.detach().cpu().numpy()
    return np.asarray(value)


def parse_parameter(text: str) -> tuple[str, str]:
    """``(pipeline, features reference)`` of a ``tritonrepo_drift`` value.

    Raises:
        ValueError: not JSON with a string ``pipeline``.
    """
    value = json.loads(text)
    if not isinstance(value, dict) or not isinstance(value.get("pipeline"), str):
        raise ValueError(f"{DRIFT_PARAMETER} = {text!r}: expected JSON with a 'pipeline' name")
    return value["pipeline"], str(value.get("features") or DEFAULT_FEATURES)


class FeatureMonitor:
    """Counts one model instance's requests per feature bin (module docstring).

    Args:
        pb_utils: ``triton_python_backend_utils`` (``MetricFamily`` with counters and gauges).
        profile: the pipeline's reference profile.
        features: the features function.
        context: passed to it.
        labels: the stub's labels (:func:`tritonrepo.step.metrics.stub_labels`).
    """

    def __init__(
        self,
        pb_utils: Any,
        profile: Profile,
        features: FeatureFunction,
        context: FeatureContext,
        labels: Mapping[str, str],
    ) -> None:
        self.profile = profile
        self.features = features
        self.context = context
        family = pb_utils.MetricFamily
        base = {"pipeline": profile.pipeline, **labels}
        # The families must outlive their metrics: keep them.
        self._families = [
            family(name=BINS_METRIC, description="Items a pipeline received, per feature and "
                   "bin of its reference profile", kind=family.COUNTER),
            family(name=REFERENCE_METRIC, description="Share of the reference data in each bin "
                   "of a feature (make artifacts)", kind=family.GAUGE),
            family(name=SECONDS_METRIC, description="Time spent computing and counting input "
                   "features, seconds", kind=family.COUNTER),
        ]  # fmt: skip
        bins_family, reference_family, seconds_family = self._families
        self._bins: dict[str, list[Any]] = {}
        self._references: list[Any] = []
        for name, feature in profile.features.items():
            metrics = []
            for index, share in enumerate(feature.shares):
                bin_labels = {**base, "feature": name, "bin": f"{index:02d}",
                              "upper": feature.upper(index)}  # fmt: skip
                metrics.append(bins_family.Metric(labels=bin_labels))
                reference = reference_family.Metric(labels=bin_labels)
                reference.set(share)
                self._references.append(reference)
            self._bins[name] = metrics
        self._seconds = seconds_family.Metric(labels=base)
        # Counts and seconds not yet sent (flush), guarded by _lock: observe() runs on the
        # execute thread, the flusher on its own.
        self._lock = threading.Lock()
        self._pending: dict[str, np.ndarray] = {}
        self._pending_seconds = 0.0
        self._sent_at = time.monotonic()
        self._stop = threading.Event()
        self._flusher = threading.Thread(target=self._flush_loop, name="drift-flush", daemon=True)
        self._flusher.start()

    @classmethod
    def from_parameter(
        cls, pb_utils: Any, parameter: str, repository: Path, batched: bool,
        labels: Mapping[str, str],
    ) -> FeatureMonitor:  # fmt: skip
        """The monitor a ``tritonrepo_drift`` parameter asks for: the profile from
        ``<repository>/<pipeline>/drift_profile.json``, the function loaded with the checkout
        root (``repository``'s parent) on ``sys.path``.

        Raises:
            ValueError: the parameter is malformed; ProfileError: the profile is not one.
            OSError: the profile file is missing (``make artifacts`` writes it).
            FunctionImportError: the features function cannot be loaded.
        """
        pipeline, reference = parse_parameter(parameter)
        profile = read_profile(repository / pipeline / PROFILE_FILE)
        function = load_function(reference, code_root=repository.parent)
        return cls(pb_utils, profile, function, FeatureContext(repository, batched), labels)

    def observe(self, requests: Sequence[Mapping[str, np.ndarray]]) -> None:
        """Count the items of ``requests`` (each the inputs of one answered request); the counts
        reach Triton's metrics within :data:`FLUSH_INTERVAL_S`.

        Raises:
            Exception: whatever the features function raises (the caller logs it).
        """
        start = time.perf_counter()
        values: dict[str, list[np.ndarray]] = {}
        for host in self.batches(requests):
            for name, value in self.features(host, self.context).items():
                values.setdefault(name, []).append(np.asarray(value, dtype=np.float64).ravel())
        counted = {}
        for name, parts in values.items():
            feature = self.profile.features.get(name)
            if feature is not None:
                counted[name] = feature.counts(np.concatenate(parts))
        with self._lock:
            for name, counts in counted.items():
                held = self._pending.get(name)
                self._pending[name] = counts if held is None else held + counts
            self._pending_seconds += time.perf_counter() - start
            due = time.monotonic() - self._sent_at >= FLUSH_INTERVAL_S
        if due:
            self.flush()

    def batches(self, requests: Sequence[Mapping[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        """The requests' inputs on the host, joined along the batch dim into one set when the
        model batches and every request has the same inputs of the same item shape (one call
        of the features function per execute: a batch of 10 rows of 30 columns was counted in
        59 µs a row one request at a time); else one set per request."""
        hosts = [{name: host_array(value) for name, value in r.items()} for r in requests]
        if not self.context.batched or len(hosts) < 2:
            return hosts
        first = hosts[0]
        same = all(
            h.keys() == first.keys()
            and all(h[n].shape[1:] == first[n].shape[1:] and h[n].dtype == first[n].dtype
                    for n in first)
            for h in hosts[1:]
        )  # fmt: skip
        if not same:
            return hosts
        return [{name: np.concatenate([h[name] for h in hosts]) for name in first}]

    def flush(self) -> None:
        """Send the counts and seconds held since the last flush to Triton's metrics."""
        with self._lock:
            pending, self._pending = self._pending, {}
            seconds, self._pending_seconds = self._pending_seconds, 0.0
            self._sent_at = time.monotonic()
            for name, counts in pending.items():
                metrics = self._bins[name]
                for index in np.flatnonzero(counts):
                    metrics[index].increment(float(counts[index]))
            if seconds and self._seconds is not None:
                self._seconds.increment(seconds)

    def _flush_loop(self) -> None:
        while not self._stop.wait(FLUSH_INTERVAL_S):
            with contextlib.suppress(Exception):  # a failed send loses counts, not the stub
                self.flush()

    def close(self) -> None:
        """Send what is held, stop the flusher and delete this stub's series (metrics first,
        then families; see :mod:`tritonrepo.step.metrics`). Called from ``finalize``."""
        self._stop.set()
        self._flusher.join(timeout=FLUSH_INTERVAL_S * 2)
        with contextlib.suppress(Exception):  # Triton may be going away
            self.flush()
        with self._lock:
            self._bins.clear()
            self._references.clear()
            self._seconds = None
            self._families.clear()


def monitor_for(
    pb_utils: Any,
    parameters: Mapping[str, str],
    model_config: Mapping[str, Any],
    args: Mapping[str, str],
) -> FeatureMonitor | None:
    """The monitor for a model instance whose config carries ``tritonrepo_drift``, else None.

    Raises:
        as :meth:`FeatureMonitor.from_parameter`.
    """
    parameter = parameters.get(DRIFT_PARAMETER)
    if not parameter:
        return None
    repository = Path(args["model_repository"]).parent
    labels = stub_labels(args["model_name"], args.get("model_version", ""),
                         args.get("model_instance_name", ""))  # fmt: skip
    batched = int(model_config.get("max_batch_size", 0)) > 0
    return FeatureMonitor.from_parameter(pb_utils, parameter, repository, batched, labels)
