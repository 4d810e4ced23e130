"""A ``prometheus`` process of a test's own (Debian's ``prometheus`` package; ``make test``
installs it): the shipped scrape config and rules with the targets pointed at the test's ports,
scrape and rule evaluation every second, temporary storage; and its HTTP API."""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.server.test_faults import wait_for
from tritonrepo.server.embedded_server import tied_to_parent
from tritonrepo.server.launcher import free_port

ROOT = Path(__file__).resolve().parents[2]
RULES_DIR = ROOT / "deploy" / "prometheus"
ALERTS = RULES_DIR / "alerts.yml"
PROMETHEUS_CONFIG = RULES_DIR / "prometheus.yml"
REQUEST_DEADLINE_S = 30.0  # network timeout of every HTTP call here


def tool(name: str) -> str:
    """Path of ``prometheus`` / ``promtool``; fails (not skips) when missing."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(
            f"{name} is missing: `make test` installs Debian's prometheus package "
            f"(as root: apt-get install prometheus)"
        )
    return path


@dataclass
class Prometheus:
    """A ``prometheus`` process of the test's own and its HTTP API."""

    url: str
    process: subprocess.Popen
    log_file: Path

    def api(self, path: str, **params: str) -> Any:
        """``data`` of ``GET /api/v1/<path>``; an error names Prometheus' reason."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        try:
            with urllib.request.urlopen(
                f"{self.url}/api/v1/{path}{query}", timeout=REQUEST_DEADLINE_S
            ) as response:
                body = json.load(response)
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"{path} {params}: {exc.read().decode()}") from None
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        """The instant vector of ``expr`` now (``[]`` when empty)."""
        return self.api("query", query=expr)["result"]

    def firing(self) -> set[tuple[str, str]]:
        """(alertname, model label) of the alerts firing now (pending ones left out)."""
        return {
            (a["labels"]["alertname"], a["labels"].get("model", ""))
            for a in self.api("alerts")["alerts"]
            if a["state"] == "firing"
        }

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@contextlib.contextmanager
def running_prometheus(
    directory: Path, targets: dict[str, int], edit_rule: Callable[[dict], None]
) -> Iterator[Prometheus]:
    """``prometheus`` on a free port with storage in ``directory``, scraping each job of the
    shipped ``prometheus.yml`` named in ``targets`` (job name -> port on 127.0.0.1; the other
    jobs are left out) every second, with the shipped rules after ``edit_rule`` changed each
    of them in a copy (e.g. a shorter ``for:``)."""
    alerts = yaml.safe_load(ALERTS.read_text())
    for group in alerts["groups"]:
        for rule in group["rules"]:
            edit_rule(rule)
    (directory / "alerts.yml").write_text(yaml.safe_dump(alerts, sort_keys=False))
    config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
    config["global"].update(scrape_interval="1s", evaluation_interval="1s", scrape_timeout="1s")
    config["rule_files"] = ["alerts.yml"]
    jobs = {job["job_name"] for job in config["scrape_configs"]}
    assert set(targets) <= jobs, f"{sorted(targets)} are not all jobs of {sorted(jobs)}"
    config["scrape_configs"] = [j for j in config["scrape_configs"] if j["job_name"] in targets]
    for job in config["scrape_configs"]:
        job["static_configs"] = [{"targets": [f"127.0.0.1:{targets[job['job_name']]}"]}]
    (directory / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    port = free_port(avoid=targets.values())  # not a target's port, should one be unbound
    log_file = directory / "prometheus.log"
    with open(log_file, "wb") as log:
        command, preexec_fn = tied_to_parent(
            [
                tool("prometheus"),
                f"--config.file={directory / 'prometheus.yml'}",
                f"--storage.tsdb.path={directory / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ]
        )
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, preexec_fn=preexec_fn
        )
    prom = Prometheus(f"http://127.0.0.1:{port}", process, log_file)

    def ready() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"prometheus exited: {log_file.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{prom.url}/-/ready", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    try:
        wait_for("prometheus ready", ready, 30.0)
        yield prom
    finally:
        prom.stop()
