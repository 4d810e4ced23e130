"""The launcher's self-healing supervisor: a thread that runs
:meth:`tritonrepo_client.healing.Healer.watch` on the served models every few seconds, over HTTP
with the repository key. It writes each restore (or failed one) as one ``heal:`` line on the
launcher's stderr and, when ``heal_metrics_port`` is set, publishes what it saw as Prometheus
metrics (:mod:`tritonrepo_client.heal_metrics`). Besides the probe inferences it watches the
server's stub processes (:class:`StubWatch`): under load, probes of a model with two instances
keep landing on the healthy one."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

from tritonrepo.server_processes import StubProcess


class StubWatch:
    """Instances seen alive before and absent from two scans in a row (one scan per heal pass;
    a reload that Triton swaps in replaces a stub without a gap, the second scan is a margin
    for it).

    Args:
        list_stubs: the server's live stub processes (``TritonServer.stub_processes``).
    """

    def __init__(self, list_stubs: Callable[[], list[StubProcess]]) -> None:
        self._list = list_stubs
        self._known: set[str] = set()
        self._missing: set[str] = set()

    def __call__(self) -> list[str]:
        """Instance names that died (an unloaded model's too: the healer skips models that are
        not loaded)."""
        live = {s.instance for s in self._list()}
        missing = self._known - live
        dead = sorted(missing & self._missing)
        self._missing = missing
        self._known |= live
        return dead


def log(line: str) -> None:
    """One line on the launcher's stderr (``make serve`` shows it)."""
    print(line, file=sys.stderr, flush=True)


class Supervisor:
    """The healing thread of one server.

    Args:
        options: the server's ``tritonrepo.launcher.ServerOptions`` (URL, key, models,
            ``heal_backoff_s``).
        list_stubs: the server's live stub processes.
        reports: list the step reports (``tritonrepo_client.healing.StepReport``) are
            appended to.
    """

    def __init__(
        self,
        options: Any,
        list_stubs: Callable[[], list[StubProcess]],
        reports: list,
    ) -> None:
        self.options = options
        self._list_stubs = list_stubs
        self.reports = reports
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, interval_s: float) -> None:
        """Start healing every ``interval_s`` seconds (a daemon thread)."""
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, args=(interval_s,), name="tritonrepo heal", daemon=True
        )
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop, waiting up to ``timeout_s`` seconds for a reload in progress (a daemon thread
        cannot keep the process alive)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def _run(self, interval_s: float) -> None:
        from tritonrepo_client.connection import TritonConnection
        from tritonrepo_client.heal_metrics import HealMetrics
        from tritonrepo_client.healing import ChangeLog, Healer
        from tritonrepo_client.repository import RepositoryClient

        o = self.options
        changes = ChangeLog()
        last_error = [""]
        metrics = HealMetrics(o.models)

        def on_report(report: Any) -> None:
            self.reports.extend(report.steps)
            metrics.observe(report)
            last_error[0] = ""
            for line in changes.lines(report):
                log(f"heal: {line}")

        def on_error(exc: Exception) -> None:
            metrics.failed_pass(exc)
            if str(exc) != last_error[0] and not self._stop.is_set():
                log(f"heal: pass failed: {exc}")
            last_error[0] = str(exc)

        try:
            if o.heal_metrics_port is not None:
                metrics.serve(o.heal_metrics_port, o.host)
            with (
                RepositoryClient(o.http_url, "http", key=o.repository_key or "") as repo,
                TritonConnection(o.http_url, "http", timeout_s=30.0) as conn,
            ):
                healer = Healer(
                    repo,
                    o.models,
                    conn,
                    backoff_s=o.heal_backoff_s,
                    dead_instances=StubWatch(self._list_stubs),
                )
                metrics.track_loaded(healer)
                healer.watch(interval_s, self._stop, on_report, on_error)
        except Exception as exc:  # the supervisor must say why it stopped, not vanish
            log(f"heal: supervisor stopped: {type(exc).__name__}: {exc}")
        finally:
            metrics.close()
