"""Per-step error counters on Triton's metrics endpoint (the Python backend's custom metrics).

Triton 2.51 counts a request that a Python step answered with an error against the ensemble
only: the step's own ``nv_inference_request_failure`` does not move (the step *did* answer).
So which step refused a request, and why, is invisible in Triton's metrics. Every
:class:`~tritonrepo.step.python_step.PythonStep` therefore counts its error answers in

``tritonrepo_step_errors_total{model, version, instance, kind}``

with ``kind`` one of :data:`ERROR_KINDS`:

* ``invalid_input``: the client sent something the step cannot serve (bad UTF-8, a wrong
  shape, an unknown session): the client's fault, not the server's;
* ``over_limit``: a documented size limit was exceeded (:class:`~tritonrepo.step.errors.OverLimit`);
* ``internal``: anything else, i.e. a bug or a broken dependency: the server's fault.

The ``instance`` label keeps the two instances of a model apart: Triton shares one series
between metrics with identical labels, and the first instance to unload would delete the
other's. All three series exist from ``initialize`` on at 0, so ``rate()`` sees the first
error. Source of the API: python_backend README, "Custom Metrics" (``pb_utils.MetricFamily``).
"""

from __future__ import annotations

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
            labels = {"model": model, "version": version, "instance": instance, "kind": kind}
            self._metrics[kind] = self._family.Metric(labels=labels)

    def count(self, kind: str) -> None:
        """Add one error answer of ``kind`` (one of :data:`ERROR_KINDS`)."""
        metric = self._metrics.get(kind)
        if metric is not None:
            metric.increment(1)
