"""The launcher's self-healing supervisor: a thread that runs
:meth:`tritonrepo_client.control.healing.healer.Healer.watch` on the served models every few
seconds, over HTTP with the repository key. It writes each restore (or failed one) as one ``heal:``
line on the launcher's stderr and, when ``heal_metrics_port`` is set, publishes what it saw as
Prometheus metrics (:mod:`tritonrepo_client.control.healing.metrics`). Besides the probe inferences
it watches the server's stub processes (:class:`StubWatch`): under load, probes of a model with two
instances keep landing on the healthy one.

While the launcher restarts a ``tritonserver`` that died (:mod:`tritonrepo.server.restart`) the
supervisor is paused (its models count as not ready), and resumed with a fresh stub watch once
the new process serves; it counts each restart in ``tritonrepo_server_restarts_total``. A pass
that fails in any way is logged and the next one runs: the thread only ends when stopped."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

from tritonrepo.server.processes import StubProcess, is_instance_name, region_exists


class StubWatch:
    """Instance stubs that were killed: seen alive, then gone while their shared-memory region
    is left in ``/dev/shm``, in two scans in a row (one scan per heal pass; the second is a
    margin for a stub that is exiting).

    Measured on 2.51 (``tritonserver`` of nvidia-pytriton 0.7.0): a stub that ends cleanly (an
    unload, a reload that swaps in new instances, the end of a load) has its region removed by
    the time its process is gone; a stub killed with SIGKILL leaves its region until Triton
    unloads the model. Only *instance* stubs count, named ``<model>_<group>_<index>``
    (:func:`is_instance_name`): while Triton loads a Python model it also runs a short-lived
    stub named after the bare model, which is never an instance that died. A name is reported
    once and forgotten; a reload that brings the instance back makes it seen again.

    Args:
        list_stubs: the server's live stub processes (``TritonServer.stub_processes``).
        region_left: whether a stub's region (its name in ``/dev/shm``) still exists.
    """

    def __init__(
        self,
        list_stubs: Callable[[], list[StubProcess]],
        region_left: Callable[[str], bool] = region_exists,
    ) -> None:
        self._list = list_stubs
        self._region_left = region_left
        self._known: dict[str, str] = {}  # instance -> region
        self._missing: set[str] = set()

    def __call__(self) -> list[str]:
        """Instance names killed since they were last seen (an unloaded model's too, should
        one be killed while it unloads: the healer skips models that are not loaded)."""
        live = {s.instance: s.region for s in self._list() if is_instance_name(s.instance)}
        killed = {
            instance
            for instance, region in self._known.items()
            if instance not in live and self._region_left(region)
        }
        dead = killed & self._missing
        self._missing = killed - dead
        self._known = {i: r for i, r in self._known.items() if i in self._missing} | live
        return sorted(dead)


def log(line: str) -> None:
    """One line on the launcher's stderr (``make serve`` shows it)."""
    print(line, file=sys.stderr, flush=True)


class Supervisor:
    """The healing thread of one server.

    Args:
        options: the server's ``tritonrepo.server.launcher.ServerOptions`` (key, models, host,
            ``heal_backoff_s``, ``heal_metrics_port``).
        list_stubs: the server's live stub processes.
        reports: list the step reports (``tritonrepo_client.control.healing.healer.StepReport``) are
            appended to.
        url: ``host:port`` of the HTTP endpoint to heal through (default ``options.http_url``:
            the HTTP guard when there is one).
    """

    def __init__(
        self,
        options: Any,
        list_stubs: Callable[[], list[StubProcess]],
        reports: list,
        url: str | None = None,
    ) -> None:
        from tritonrepo_client.control.healing.metrics import HealMetrics

        self.options = options
        self.url = url or options.http_url
        self._list_stubs = list_stubs
        self.reports = reports
        self.metrics = HealMetrics(options.models)
        self._stop = threading.Event()
        self._paused = threading.Event()
        self._fresh_watch = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, interval_s: float) -> None:
        """Start healing every ``interval_s`` seconds (a daemon thread)."""
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, args=(interval_s,), name="tritonrepo heal", daemon=True
        )
        self._thread.start()

    def signal_stop(self) -> None:
        """Tell the thread to stop after the pass in progress, without waiting."""
        self._stop.set()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop, waiting up to ``timeout_s`` seconds for a reload in progress (a daemon thread
        cannot keep the process alive)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def pause(self) -> None:
        """Skip passes (the server is down and being restarted); every model reads not ready."""
        self._paused.set()
        self.metrics.unreachable()

    def resume(self) -> None:
        """Pass again, with a fresh watch of the stubs (the restarted server's)."""
        self._fresh_watch.set()
        self._paused.clear()

    def server_restarted(self, restart: Any) -> None:
        """Count a restart of tritonserver (a ``tritonrepo.server.restart.ServerRestart``)."""
        self.metrics.server_restarted(restart.signal, restart.ready_s)

    def _run(self, interval_s: float) -> None:
        from tritonrepo_client.connection import ClientError, TritonConnection
        from tritonrepo_client.control.healing.healer import ChangeLog, Healer
        from tritonrepo_client.control.repository import RepositoryClient

        o = self.options
        metrics = self.metrics
        changes = ChangeLog()
        last_error = [""]

        def on_report(report: Any) -> None:
            self.reports.extend(report.steps)
            metrics.observe(report)
            last_error[0] = ""
            for line in changes.lines(report):
                log(f"heal: {line}")

        def on_error(exc: Exception) -> None:
            if isinstance(exc, ClientError):
                metrics.failed_pass(exc)
            text = str(exc) if isinstance(exc, ClientError) else f"{type(exc).__name__}: {exc}"
            quiet = self._stop.is_set() or self._paused.is_set()
            if text != last_error[0] and not quiet:
                log(f"heal: pass failed: {text}")
            last_error[0] = text

        try:
            if o.heal_metrics_port is not None:
                metrics.serve(o.heal_metrics_port, o.host)
            with (
                RepositoryClient(self.url, "http", key=o.repository_key or "") as repo,
                TritonConnection(self.url, "http", timeout_s=30.0) as conn,
            ):
                healer = Healer(
                    repo,
                    o.models,
                    conn,
                    backoff_s=o.heal_backoff_s,
                    dead_instances=StubWatch(self._list_stubs),
                )
                metrics.track_loaded(healer)
                while not self._stop.is_set():
                    if self._fresh_watch.is_set():
                        self._fresh_watch.clear()
                        healer.dead_instances = StubWatch(self._list_stubs)
                        metrics.track_loaded(healer)
                    if not self._paused.is_set():
                        try:
                            on_report(healer.heal_once())
                        except Exception as exc:  # a failed pass must not end the thread
                            on_error(exc)
                    self._stop.wait(interval_s)
        except Exception as exc:  # the supervisor must say why it stopped, not vanish
            log(f"heal: supervisor stopped: {type(exc).__name__}: {exc}")
        finally:
            metrics.close()
