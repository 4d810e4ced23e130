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
import time
from collections.abc import Callable
from typing import Any

from tritonrepo.server.processes import StubProcess, is_instance_name, region_exists

# Seconds between the two looks at a stub that is gone while its region is left: the second
# is a margin for a stub that is exiting. Measured on 2.51 (2 ms polls during reloads and
# unloads): a stub that ends cleanly has its region removed before it leaves /proc.
CONFIRM_S = 0.25


class StubWatch:
    """Instance stubs that were killed: seen alive, then gone while their shared-memory region
    is left in ``/dev/shm``, in two looks ``confirm_s`` seconds apart within one call (one call
    per heal pass), so the pass that first sees the stub gone already knows: the healer then
    reloads the step without sending a request to the dead stub (each one leaves its model
    held in Triton 2.51: :meth:`tritonrepo_client.control.healing.healer.Healer._dead_steps`).

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
        confirm_s: seconds between the two looks (only taken when a stub is missing).
    """

    def __init__(
        self,
        list_stubs: Callable[[], list[StubProcess]],
        region_left: Callable[[str], bool] = region_exists,
        confirm_s: float = CONFIRM_S,
    ) -> None:
        self._list = list_stubs
        self._region_left = region_left
        self._confirm_s = confirm_s
        self._known: dict[str, str] = {}  # instance -> region

    def _look(self) -> tuple[set[str], dict[str, str]]:
        """(known instances gone with their region left, live instance -> region)."""
        live = {s.instance: s.region for s in self._list() if is_instance_name(s.instance)}
        killed = {
            instance
            for instance, region in self._known.items()
            if instance not in live and self._region_left(region)
        }
        return killed, live

    def __call__(self) -> list[str]:
        """Instance names killed since they were last seen (an unloaded model's too, should
        one be killed while it unloads: the healer skips models that are not loaded)."""
        killed, live = self._look()
        if killed:
            time.sleep(self._confirm_s)
            again, live = self._look()
            killed &= again
        self._known = live
        return sorted(killed)


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
        cannot keep the process alive); a later call waits again for a thread still running.
        Once the thread has ended, its HTTP connections are closed."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if not self._thread.is_alive():
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
                        healer.watch_anew(StubWatch(self._list_stubs))
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
