"""Per-step error counters on Triton's metrics endpoint (the Python backend's custom metrics).

Triton 2.51 counts a request that a Python step answered with an error against the ensemble
only: the step's own ``nv_inference_request_failure`` does not move (the step *did* answer).
So which step refused a request, and why, is invisible in Triton's metrics. Every
:class:`~tritonrepo.step.python_step.PythonStep` therefore counts its error answers in

``tritonrepo_step_errors_total{model, version, instance, stub_pid, kind}``

with ``kind`` one of :data:`ERROR_KINDS`:

* ``invalid_input``: the client sent something the step cannot serve (bad UTF-8, a wrong
  shape, an unknown session): the client's fault, not the server's;
* ``over_limit``: a documented size limit was exceeded (:class:`~tritonrepo.step.errors.OverLimit`);
* ``internal``: anything else, i.e. a bug or a broken dependency: the server's fault.

The ``instance`` and ``stub_pid`` labels give every stub process series of its own. Triton
2.51 shares one Prometheus series between all metrics with identical labels, but each stub's
family counts its own references to it (core ``src/metric_family.cc``, ``MetricFamily::Remove``):
the first stub to delete its metric frees the series the others still write to. A reload swaps
in a new instance of the same name before the old one is finalized, so ``instance`` alone is not
enough (measured: with shared labels, deleting in ``finalize`` ended tritonserver in 2 of 2
CPU config switches under load, SIGSEGV or a ``malloc_consolidate()`` SIGABRT). All three series
exist from ``initialize`` on at 0, so ``rate()`` sees the first error; a reloaded instance starts
new series at 0 (Prometheus reads the switch as a counter reset). Source of the API:
python_backend README, "Custom Metrics" (``pb_utils.MetricFamily``).

Lifetime: the stub destroys the metric objects still alive when it exits after its channel to
the server is gone, so their series would stay on ``/metrics`` with their last values after an
unload. :meth:`StepErrorCounters.close` (called by
:meth:`~tritonrepo.step.python_step.PythonStep.finalize`) drops them while the channel works:
the metrics, then their family, as the README asks. A step with metrics of its own drops them
the same way (``ctr_session``'s sessions gauge). A stub that is killed never gets there: its
series stay, with their ``stub_pid``, until the server restarts.
"""

from __future__ import annotations

import os
from typing import Any

from tritonrepo.step.errors import InvalidRequest, OverLimit

ERRORS_METRIC = "tritonrepo_step_errors_total"
ERROR_KINDS = ("invalid_input", "over_limit", "internal")


def error_kind(error: BaseException) -> str:
    """The ``kind`` label of an error answer: ``"over_limit"`` for
    :class:`~tritonrepo.step.errors.OverLimit`, ``"invalid_input"`` for any other
    :class:`~tritonrepo.step.errors.InvalidRequest`, else ``"internal"``."""
    if isinstance(error, OverLimit):
        return "over_limit"
    if isinstance(error, InvalidRequest):
        return "invalid_input"
    return "internal"


def stub_labels(model: str, version: str, instance: str) -> dict[str, str]:
    """The labels of one stub process's custom metrics: model, version, instance and the stub's
    process id (``stub_pid``: see the module docstring)."""
    return {"model": model, "version": version, "instance": instance, "stub_pid": str(os.getpid())}


class StepErrorCounters:
    """One counter per error kind for one model instance.

    Args:
        pb_utils: ``triton_python_backend_utils`` (needs ``MetricFamily``, Python backend
            >= 23.05; without it nothing is counted).
        model: the model's name; ``version`` and ``instance``: the loaded version and the
            instance name (``args["model_instance_name"]``).
    """

    def __init__(self, pb_utils: Any, model: str, version: str, instance: str) -> None:
        self._metrics: dict[str, Any] = {}
        self._family: Any = None
        family_type = getattr(pb_utils, "MetricFamily", None)
        if family_type is None:
            return
        # The family must outlive its metrics: keep it.
        self._family = family_type(
            name=ERRORS_METRIC,
            description="Error answers of a Python step, by kind (invalid_input, over_limit, "
            "internal)",
            kind=family_type.COUNTER,
        )
        for kind in ERROR_KINDS:
            labels = {**stub_labels(model, version, instance), "kind": kind}
            self._metrics[kind] = self._family.Metric(labels=labels)

    def close(self) -> None:
        """Delete this stub's series from Triton's metrics endpoint: the metrics, then the
        family (the last Python reference to each goes); counting afterwards does nothing.
        Called from ``finalize``."""
        self._metrics.clear()
        self._family = None

    def count(self, kind: str) -> None:
        """Add one error answer of ``kind`` (one of :data:`ERROR_KINDS`)."""
        metric = self._metrics.get(kind)
        if metric is not None:
            metric.increment(1)
