"""The shipped Prometheus rules, scrape config and Grafana dashboard
(``deploy/prometheus``, ``deploy/grafana``), checked with promtool and against a real
Prometheus (Debian's ``prometheus`` package; ``make test`` installs it) that scrapes a real
server and its self-healing supervisor during traffic.

* ``promtool check rules`` / ``check config`` and the rules' unit tests
  (``promtool test rules deploy/prometheus/alerts.test.yml``) pass, and every query of the
  dashboard parses.
* A server of the module's own (text_embedding, ctr_session and the ctr_model it calls;
  supervisor every second with its metrics port) and a ``prometheus`` process of the test's own
  (free port, temporary storage, scrape and rule evaluation every second). The scrape config is
  the shipped ``prometheus.yml`` with the targets pointed at this server; the rules are the
  shipped ``alerts.yml`` with every ``for:`` shortened to ``FOR_IN_TEST`` in a temporary copy,
  so that alerts fire in test time; nothing else is changed.
* During traffic (a quarter of the text_embedding requests are not UTF-8: the tokenizer's
  ``invalid_input``, a failure of the ensemble): every dashboard query returns data except the
  ones named in ``EMPTY_ON_THIS_SERVER``, every recording rule
  returns data, and exactly the alerts of ``FIRING_DURING_BAD_TRAFFIC`` fire.
* A step broken on purpose: its stub killed (the supervisor restores it, and
  TritonrepoStepRestarted fires), then a step unloaded (the ensemble cannot serve, and
  TritonrepoModelNotReady fires). Each firing is read from Prometheus' ``/api/v1/alerts``.

Every wait has a deadline (seconds).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from tests.conftest import require_artifacts, server_options
from tests.deploy.prometheus_run import (
    ALERTS,
    PROMETHEUS_CONFIG,
    RULES_DIR,
    Prometheus,
    running_prometheus,
    tool,
)
from tests.server.test_faults import wait_for
from tritonrepo.ctr import spec as ctr_spec
from tritonrepo.server.launcher import TritonServer
from tritonrepo.text import spec
from tritonrepo_client import RepositoryClient, SessionClient, TritonConnection

pytestmark = pytest.mark.server

ROOT = Path(__file__).resolve().parents[2]
ALERT_TESTS = RULES_DIR / "alerts.test.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "tritonrepo-dashboard.json"

TRITON_JOB = "tritonrepo-triton"  # the shipped prometheus.yml's job names, which the rules use
HEAL_JOB = "tritonrepo-heal"
FOR_IN_TEST = "2s"  # every rule's `for:` in the test's copy of alerts.yml
RATE_INTERVAL = "30s"  # Grafana's $__rate_interval, 30 scrapes of this test
REQUEST_DEADLINE_S = 30.0  # network timeout of every client and HTTP call here
DATA_DEADLINE_S = 60.0  # for a query or an alert to show what the traffic caused
HEAL_DEADLINE_S = 60.0  # for the supervisor to restore a killed step
BAD_EVERY = 4  # every 4th text_embedding request is not UTF-8
CANDIDATES = [5, 66, 981, 4000]

# Dashboard panels whose queries are empty on this server, and why.
EMPTY_ON_THIS_SERVER = {
    "GPU utilisation",  # no GPU metrics: the launcher runs --allow-gpu-metrics=false on CPU
    "GPU memory",
    # no HTTP guard on this server, so no /_guard/metrics (tests/server/test_canary.py reads them)
    "Canary share and decisions",
    "Shadow comparison",
}
# The supervisor creates each loaded step's restart counter at 0 (HealMetrics.track), so this
# panel has data (zeros) before any restart.
RESTARTS_PANEL = "Step restarts by the supervisor"
# (alertname, model label) of the alerts that fire with a quarter of bad requests, and only those.
# TritonrepoFeatureDrift (no model label: its labels are pipeline and feature) fires too, and
# rightly: the traffic's texts ("request N", 4 tokens) are shorter than every text of
# text_embedding's reference profile (8 tokens and more).
FIRING_DURING_BAD_TRAFFIC = {
    ("TritonrepoErrorRatioHigh", spec.ENSEMBLE),
    ("TritonrepoStepClientErrorsHigh", spec.TOKENIZE_MODEL),
    ("TritonrepoFeatureDrift", ""),
}
# Panels the issue asks for (titles in the dashboard JSON).
REQUIRED_PANELS = {
    "Request rate per model",
    "Failure ratio per served model",
    "Request latency p50 / p99 / mean",
    "Queue time per request",
    "Compute time per request, by step",
    "Pending requests",
    "Batch size",
    "Step errors by kind",
    "Sessions active",
    "Model ready (real-inference probe)",
    "Step restarts by the supervisor",
    "GPU utilisation",
    "GPU memory",
}


# --- files: promtool and the dashboard ----------------------------------------------------------
def promtool(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [tool("promtool"), *args], capture_output=True, text=True, timeout=60, cwd=cwd
    )


def dashboard_panels() -> list[dict]:
    """The dashboard's panels (rows left out)."""
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [p for p in panels if p["type"] != "row"]


def panel_queries(panel: dict) -> list[str]:
    """A panel's PromQL with the dashboard variables as Grafana sends them: ``$model`` = All
    (``.*``), ``$__rate_interval`` = ``RATE_INTERVAL``."""
    queries = []
    for target in panel["targets"]:
        expr = target["expr"].replace("$__rate_interval", RATE_INTERVAL).replace("$model", ".*")
        assert "$" not in expr, f"{panel['title']}: unknown variable in {expr}"
        queries.append(expr)
    return queries


def rules(path: Path = ALERTS) -> list[dict]:
    """Every rule of a rule file, recording and alerting."""
    return [r for g in yaml.safe_load(path.read_text())["groups"] for r in g["rules"]]


def test_promtool_checks_and_rule_unit_tests_pass():
    for args in (
        ("check", "rules", str(ALERTS)),
        ("check", "config", str(PROMETHEUS_CONFIG)),
        ("test", "rules", ALERT_TESTS.name),
    ):
        out = promtool(*args, cwd=RULES_DIR)
        assert out.returncode == 0, f"promtool {' '.join(args)}:\n{out.stdout}{out.stderr}"
    alerts = {r["alert"] for r in rules() if "alert" in r}
    tested = set(ALERT_TESTS.read_text().split()) & alerts
    assert tested == alerts, f"alerts without a unit test: {sorted(alerts - tested)}"


def test_every_alert_has_labels_annotations_and_a_runbook_section():
    """severity and service labels, summary/description/runbook, and a runbook_url whose
    anchor is a section of docs/operations/monitoring.md."""
    doc = (ROOT / "docs" / "operations" / "monitoring.md").read_text()
    sections = {line[4:].strip().lower() for line in doc.splitlines() if line.startswith("### ")}
    for rule in rules():
        if "alert" in rule:
            assert rule["labels"]["severity"] in ("critical", "warning", "info"), rule["alert"]
            assert rule["labels"]["service"] == "tritonrepo", rule["alert"]
            assert {"summary", "description", "runbook", "runbook_url"} <= set(rule["annotations"])
            anchor = rule["annotations"]["runbook_url"].split("#")[1]
            assert anchor == rule["alert"].lower() and anchor in sections, rule["alert"]


def test_dashboard_is_importable_and_every_query_parses(tmp_path):
    """Schema, the datasource and model variables, every panel on ``${datasource}``, the panels
    the issue asks for, and every query parsed by promtool (as a recording rule)."""
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["schemaVersion"] == 39
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["model"]["includeAll"] and variables["model"]["allValue"] == ".*"
    panels = dashboard_panels()
    assert {p["title"] for p in panels} >= REQUIRED_PANELS
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    records = []
    for panel in panels:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
        records += [
            {"record": f"dashboard:query_{len(records) + i}", "expr": q}
            for i, q in enumerate(panel_queries(panel))
        ]
    path = tmp_path / "dashboard_queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": records}]}))
    out = promtool("check", "rules", str(path))
    assert out.returncode == 0, out.stdout + out.stderr


# --- a real server, its supervisor, traffic and a real Prometheus -------------------------------
@pytest.fixture(scope="module")
def server() -> Iterator[TritonServer]:
    """text_embedding and ctr_session (+ the ctr_model it calls), supervised every second, the
    supervisor's metrics on a port of their own."""
    require_artifacts()
    options = server_options(
        "test_monitoring",
        models=(spec.ENSEMBLE, ctr_spec.CORE_MODEL, "ctr_session"),
        heal_interval_s=1.0,
        heal_backoff_s=2.0,
        heal_metrics=True,
        stop_timeout_s=10.0,
    )
    with TritonServer(options) as server:
        yield server


@pytest.fixture(scope="module")
def prometheus(server: TritonServer, tmp_path_factory) -> Iterator[Prometheus]:
    """``prometheus`` on a free port with temporary storage, scraping ``server`` and its
    supervisor every second with the shipped config and rules (``for:`` shortened)."""

    def shorten(rule: dict) -> None:
        if "for" in rule:
            rule["for"] = FOR_IN_TEST

    ports = {TRITON_JOB: server.options.metrics_port, HEAL_JOB: server.options.heal_metrics_port}
    with running_prometheus(tmp_path_factory.mktemp("prometheus"), ports, shorten) as prom:
        yield prom


@dataclass
class Traffic:
    """Closed-loop clients in threads until stopped: text_embedding over HTTP (every
    ``BAD_EVERY``-th request not UTF-8) and ctr_session sessions of three events; plus one
    session left open, so ``tritonrepo_sessions_active`` is 1. Counts outcomes by kind."""

    url: str
    counts: Counter = field(default_factory=Counter)
    stop_event: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)

    def __enter__(self) -> Traffic:
        self.sessions = SessionClient(self.url, timeout_s=REQUEST_DEADLINE_S)
        self.open_session = self.sessions.session("monitoring-open")
        self.open_session.send(12, CANDIDATES)
        for target in (self._embed, self._embed, self._sessions):
            thread = threading.Thread(target=target, daemon=True)
            thread.start()
            self.threads.append(thread)
        return self

    def _count(self, kind: str, call: Callable[[], Any]) -> None:
        try:
            call()
            self.counts[f"{kind} ok"] += 1
        except Exception:  # every failure counts; the metrics say which
            self.counts[f"{kind} failed"] += 1

    def _embed(self) -> None:
        with TritonConnection(self.url, "http", timeout_s=REQUEST_DEADLINE_S) as conn:
            n = 0
            while not self.stop_event.is_set():
                n += 1
                text = b"\xff not UTF-8" if n % BAD_EVERY == 0 else f"request {n}".encode()
                inputs = {"TEXT": np.array([[text]], dtype=object)}
                self._count(
                    "embed",
                    lambda i=inputs: conn.infer(spec.ENSEMBLE, i, ["EMBEDDING"], retry=False),
                )
                self.stop_event.wait(0.02)

    def _sessions(self) -> None:
        n = 0
        while not self.stop_event.is_set():
            n += 1
            session = self.sessions.session(f"monitoring-{n}")
            for event in range(3):
                send = functools.partial(session.send, 12 + event, CANDIDATES, end=event == 2)
                self._count("session", send)
            self.stop_event.wait(0.05)

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        for thread in self.threads:
            thread.join(REQUEST_DEADLINE_S)
        with contextlib.suppress(Exception):  # a server stops at once without open sequences
            self.open_session.send(7, CANDIDATES, end=True)
        self.sessions.close()


@pytest.fixture(scope="module")
def traffic(server: TritonServer, prometheus: Prometheus) -> Iterator[Traffic]:
    with Traffic(server.options.http_url) as load:
        yield load
    print(f"\ntraffic: {dict(load.counts)}")


def test_dashboard_queries_and_rules_return_data_during_traffic(server, prometheus, traffic):
    """Every dashboard query returns data (except the documented empty ones), every recording
    rule returns data, and exactly the alerts of FIRING_DURING_BAD_TRAFFIC fire."""
    panels = dashboard_panels()
    expect_empty = EMPTY_ON_THIS_SERVER
    expect_data = [
        (p["title"], q) for p in panels if p["title"] not in expect_empty for q in panel_queries(p)
    ]
    records = [r["record"] for r in rules() if "record" in r]

    def missing() -> list[str]:
        return [f"{title}: {q}" for title, q in expect_data if not prometheus.query(q)] + [
            r for r in records if not prometheus.query(r)
        ]

    took = wait_for("data for every query", lambda: not missing(), DATA_DEADLINE_S)
    print(f"\nevery dashboard query and recording rule has data after {took:.1f} s of traffic")
    for panel in panels:
        if panel["title"] in expect_empty:
            for q in panel_queries(panel):
                assert prometheus.query(q) == [], f"{panel['title']}: {q} has data"

    took = wait_for(
        f"alerts {sorted(FIRING_DURING_BAD_TRAFFIC)} firing",
        lambda: prometheus.firing() >= FIRING_DURING_BAD_TRAFFIC,
        DATA_DEADLINE_S,
    )
    print(f"{sorted(FIRING_DURING_BAD_TRAFFIC)} firing after {took:.1f} s more")
    assert prometheus.firing() == FIRING_DURING_BAD_TRAFFIC
    # The alerts' expressions say the same: those two have data, every other one is empty.
    for rule in rules(ALERTS):
        if "alert" in rule:
            result = {
                (rule["alert"], s["metric"].get("model", ""))
                for s in prometheus.query(rule["expr"])
            }
            expected = {a for a in FIRING_DURING_BAD_TRAFFIC if a[0] == rule["alert"]}
            assert result == expected, f"{rule['alert']}: {rule['expr']}"
    assert traffic.counts["embed ok"] and traffic.counts["embed failed"], traffic.counts
    assert traffic.counts["session ok"] and not traffic.counts["session failed"], traffic.counts
    # The failure ratio is the one the clients saw (1 in BAD_EVERY, plus the supervisor's
    # passing probes), not Triton's count, which has every failure of an ensemble twice.
    ratio = prometheus.query(
        f'model:tritonrepo_failed_requests:ratio_rate5m{{model="{spec.ENSEMBLE}"}}'
    )
    assert 0.6 / BAD_EVERY < float(ratio[0]["value"][1]) <= 1.05 / BAD_EVERY, ratio
    # ... and the dashboard's panel computes the same as the recording rule.
    panel = next(p for p in panels if p["title"] == "Failure ratio per served model")
    shown = prometheus.query(panel_queries(panel)[0].replace(RATE_INTERVAL, "5m"))
    shown_ratio = {s["metric"]["model"]: float(s["value"][1]) for s in shown}
    assert shown_ratio[spec.ENSEMBLE] == pytest.approx(float(ratio[0]["value"][1]), abs=0.02)
    assert shown_ratio["ctr_session"] == 0.0, shown_ratio


def test_a_killed_step_fires_the_restart_alert(server, prometheus, traffic):
    """SIGKILL the tokenizer's stub: the supervisor reloads it, the restart counter appears,
    and TritonrepoStepRestarted fires for text_embedding_tokenize."""
    instance = f"{spec.TOKENIZE_MODEL}_0_0"
    pid = next((s.pid for s in server.stub_processes() if s.instance == instance), None)
    assert pid, f"no stub {instance}: {server.stub_processes()}"
    seen = len(server.heal_reports)
    killed_at = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    wait_for(
        f"{spec.TOKENIZE_MODEL} restored",
        lambda: any(r.step == spec.TOKENIZE_MODEL and r.ok for r in server.heal_reports[seen:]),
        HEAL_DEADLINE_S,
    )
    restored_s = time.monotonic() - killed_at
    alert = ("TritonrepoStepRestarted", spec.TOKENIZE_MODEL)
    wait_for(f"{alert} firing", lambda: alert in prometheus.firing(), DATA_DEADLINE_S)
    fired_s = time.monotonic() - killed_at
    print(f"\nkill -> restored {restored_s:.1f} s, -> {alert[0]} firing {fired_s:.1f} s")
    restarts = next(p for p in dashboard_panels() if p["title"] == RESTARTS_PANEL)
    counted = {
        s["metric"]["model"]: float(s["value"][1])
        for s in prometheus.query(panel_queries(restarts)[0])
    }
    assert counted.get(spec.TOKENIZE_MODEL, 0) >= 1, counted
    assert ("TritonrepoStepRestartFailed", spec.TOKENIZE_MODEL) not in prometheus.firing()


def test_an_unloaded_step_fires_model_not_ready(server, prometheus, traffic):
    """Unload text_embedding_normalize: Triton takes the ensemble down with it, the supervisor's
    probe fails (not a dead stub, so nothing is reloaded), tritonrepo_model_ready drops to 0
    and TritonrepoModelNotReady fires for text_embedding only."""
    with RepositoryClient(
        server.options.http_url, "http", key=server.options.repository_key
    ) as repo:
        unloaded_at = time.monotonic()
        repo.unload(spec.NORMALIZE_MODEL)
    alert = ("TritonrepoModelNotReady", spec.ENSEMBLE)
    wait_for(f"{alert} firing", lambda: alert in prometheus.firing(), DATA_DEADLINE_S)
    print(f"\nunload -> {alert[0]} firing {time.monotonic() - unloaded_at:.1f} s")
    not_ready = {m for a, m in prometheus.firing() if a == alert[0]}
    assert not_ready == {spec.ENSEMBLE}
    up = {s["metric"]["job"]: s["value"][1] for s in prometheus.query("up")}
    assert up == {TRITON_JOB: "1", HEAL_JOB: "1"}
