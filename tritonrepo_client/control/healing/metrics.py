"""Prometheus metrics of the self-healing supervisor
(:class:`~tritonrepo_client.control.healing.healer.Healer`).

Triton's own metrics say nothing about whether a model *answers*: a model whose step died stays
READY in the repository index, and a restarted step only shows as counters falling back to 0.
The healer knows both, so it publishes them, on its own port (prometheus_client):

``tritonrepo_model_ready{model}``
    1 when the model's last real-inference probe passed, 0 when it failed or the server did
    not answer (the readiness the ``health`` command and the Kubernetes probe check).
``tritonrepo_step_restarts_total{model}``
    steps the healer reloaded and that then served (the ``restored`` heal lines).
``tritonrepo_step_restart_failures_total{model}``
    reloads that did not bring the step back (``failed`` / ``gave up``).
``tritonrepo_heal_passes_total{result}``
    passes, by ``result``: ``healthy`` (every model serves afterwards), ``failing`` or
    ``unreachable`` (the server did not answer).
``tritonrepo_server_restarts_total{signal}``
    restarts of a ``tritonserver`` that died, by what ended it: the signal's name (``SIGFPE``,
    ``SIGSEGV``, ``SIGABRT``, ``SIGKILL`` ...) or ``exit`` (an exit code); counted when the
    restarted server serves again (the launcher's ``restart_on_crash``:
    :mod:`tritonrepo.server.restart`). The usual signals' series exist from the start, at 0.
``tritonrepo_server_restart_seconds``
    seconds from the last death to serving again (backoff, start and reloads included).

Run by the launcher's supervisor (``ServerOptions.heal_metrics_port``, ``make serve``: 8003)
and by ``tritonrepo-client heal --watch --metrics-port N`` (the sidecar).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from tritonrepo_client.control.healing.healer import Healer, HealReport
from tritonrepo_client.errors import ClientError, ServerUnreachable

# What ends a tritonserver that crashes or is killed (and "exit": an exit code): created at 0.
SERVER_EXIT_LABELS = ("SIGSEGV", "SIGABRT", "SIGFPE", "SIGBUS", "SIGILL", "SIGKILL", "exit")


class HealMetrics:
    """The supervisor's metrics, in their own registry.

    Args:
        models: the served models (their ``tritonrepo_model_ready`` series exist from the
            start, at 0 until the first probe passes).
    """

    def __init__(self, models: Iterable[str]) -> None:
        self.registry = CollectorRegistry()
        self.ready = Gauge(
            "tritonrepo_model_ready",
            "1 when the model's last real-inference probe passed, else 0",
            ["model"],
            registry=self.registry,
        )
        self.restarts = Counter(
            "tritonrepo_step_restarts",
            "Steps the self-healing supervisor reloaded and that then served",
            ["model"],
            registry=self.registry,
        )
        self.restart_failures = Counter(
            "tritonrepo_step_restart_failures",
            "Reloads by the self-healing supervisor that did not bring the step back",
            ["model"],
            registry=self.registry,
        )
        self.passes = Counter(
            "tritonrepo_heal_passes",
            "Self-healing passes, by result (healthy, failing, unreachable)",
            ["result"],
            registry=self.registry,
        )
        self.server_restarts = Counter(
            "tritonrepo_server_restarts",
            "Restarts of a tritonserver that died, by the signal that ended it (exit: an exit "
            "code)",
            ["signal"],
            registry=self.registry,
        )
        self.server_restart_seconds = Gauge(
            "tritonrepo_server_restart_seconds",
            "Seconds from the last death of tritonserver to serving again",
            registry=self.registry,
        )
        for label in SERVER_EXIT_LABELS:
            self.server_restarts.labels(label)
        self.models = tuple(models)
        self._probed: tuple[str, ...] = self.models
        for model in self.models:
            self.ready.labels(model).set(0)
        for result in ("healthy", "failing", "unreachable"):
            self.passes.labels(result)
        self._server: Any = None

    def track(self, steps: Iterable[str]) -> None:
        """Create the restart counters of ``steps`` at 0 (the loaded models), so the first
        restart is an increase Prometheus sees rather than a new series already at 1."""
        for step in steps:
            self.restarts.labels(step)
            self.restart_failures.labels(step)

    def observe(self, report: HealReport) -> None:
        """Record one pass's :class:`HealReport`; a model loaded at runtime that is no longer
        probed (unloaded) loses its ``tritonrepo_model_ready`` series."""
        for model in set(self._probed) - set(report.probed) - set(self.models):
            self.ready.remove(model)
        self._probed = tuple(report.probed)
        for model in report.probed:
            self.ready.labels(model).set(0 if model in report.failing else 1)
        for step in report.steps:
            if step.ok:
                self.restarts.labels(step.step).inc()
            elif step.reload_s is not None or step.outcome == "gave up":
                self.restart_failures.labels(step.step).inc()
        self.passes.labels("healthy" if report.healthy else "failing").inc()

    def server_restarted(self, signal: str, ready_s: float | None = None) -> None:
        """Count a restart of tritonserver that died of ``signal`` (a name such as ``SIGFPE``,
        or ``exit``), serving again ``ready_s`` seconds after it died."""
        self.server_restarts.labels(signal).inc()
        if ready_s is not None:
            self.server_restart_seconds.set(ready_s)

    def unreachable(self) -> None:
        """Record a pass in which the server did not answer: no model is ready."""
        for model in self.models:
            self.ready.labels(model).set(0)
        self.passes.labels("unreachable").inc()

    def failed_pass(self, error: Exception) -> None:
        """Record a pass that failed as a whole (``Healer.watch``'s ``on_error``): a server that
        does not answer is :meth:`unreachable`; other failures change nothing."""
        if isinstance(error, ServerUnreachable):
            self.unreachable()

    def track_loaded(self, healer: Healer) -> None:
        """:meth:`track` the models loaded now (nothing if the index cannot be read)."""
        with contextlib.suppress(ClientError):
            self.track(healer.loaded_models())

    def serve(self, port: int, address: str = "127.0.0.1") -> None:
        """Serve ``/metrics`` on ``address:port`` from a daemon thread.

        Raises:
            OSError: the port cannot be bound.
        """
        self._server, _ = start_http_server(port, address, registry=self.registry)

    def close(self) -> None:
        """Stop serving (no-op when not serving)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
