"""Input-drift monitoring end to end: a real server (ctr_ranking), the shipped rules in a real
Prometheus, and two streams of live requests.

* The reference stream: users of the click log's held-out split (the world the model is trained
  on, not the calibration split the profile was made from). For a whole rule window every
  feature's PSI stays below 0.1 and TritonrepoFeatureDrift stays silent.
* The shifted stream: the same users with every id moved out of the vocabulary (the upstream
  bug of a feature pipeline that starts sending another catalogue's ids). The PSI of
  ``oov_rate`` rises far above 0.25 and the alert fires for it, and only for it: the history
  lengths did not change.

Every request is answered (ids out of vocabulary are scored as the unknown id). The rules run
as shipped except the 30-minute window, shortened to ``WINDOW`` (and ``for:`` to 2 s), so that
a shift shows within the test. Also checked: the reference shares a server exports are the
profile file's, and the counted items are the requests sent.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest

from pipelines.ctr_ranking.drift import reference_log
from reference_data.click_log import HELDOUT_SPLIT
from tests.conftest import require_artifacts, server_options
from tests.deploy.prometheus_run import Prometheus, running_prometheus
from tests.server.test_faults import wait_for
from tritonrepo.ctr import spec
from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.server.launcher import TritonServer
from tritonrepo.step.feature_profile import PROFILE_FILE, read_profile
from tritonrepo_client import TritonConnection

pytestmark = pytest.mark.server

PIPELINE = "ctr_ranking"
TRITON_JOB = "tritonrepo-triton"
WINDOW = "15s"  # the rules' [30m] in the test's copy
FOR_IN_TEST = "2s"
SETTLE_S = 20.0  # more than WINDOW: the window holds only the stream being checked
WATCH_S = 10.0  # how long the reference stream is watched for an alert
DEADLINE_S = 60.0
SHIFT = 20_000  # added to every id: all of them above spec.MAX_ITEM_ID (9999)
USERS = 400


def shortened(rule: dict) -> None:
    """The test's copy of a rule: ``for:`` 2 s, every 30-minute window ``WINDOW``."""
    if "for" in rule:
        rule["for"] = FOR_IN_TEST
    rule["expr"] = rule["expr"].replace("[30m]", f"[{WINDOW}]")


@pytest.fixture(scope="module")
def server() -> Iterator[TritonServer]:
    require_artifacts()
    with TritonServer(server_options("test_drift", models=(PIPELINE,))) as s:
        yield s


@pytest.fixture(scope="module")
def prometheus(server: TritonServer, tmp_path_factory) -> Iterator[Prometheus]:
    targets = {TRITON_JOB: server.options.metrics_port}
    with running_prometheus(tmp_path_factory.mktemp("prometheus"), targets, shortened) as prom:
        yield prom


class Stream:
    """Two client threads sending ctr_ranking requests of the held-out users in turn, ids
    shifted by ``shift``; counts answers and failures."""

    def __init__(self, url: str, shift: int) -> None:
        self.url, self.shift = url, shift
        self.users = reference_log(USERS, HELDOUT_SPLIT)
        self.counts: Counter = Counter()
        self.stop_event = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(i,)) for i in range(2)]

    def __enter__(self) -> Stream:
        for thread in self.threads:
            thread.start()
        return self

    def _run(self, offset: int) -> None:
        with TritonConnection(self.url, "http", timeout_s=30.0) as conn:
            n = offset
            while not self.stop_event.is_set():
                user = self.users[n % len(self.users)]
                inputs = {k: v + self.shift for k, v in user.items()}
                try:
                    conn.infer(PIPELINE, inputs, ["ITEM_IDS", "SCORES"], retry=False)
                    self.counts["ok"] += 1
                except Exception as exc:
                    self.counts[f"failed: {exc}"] += 1
                n += 2

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        for thread in self.threads:
            thread.join(30.0)


def psi_by_feature(prometheus: Prometheus) -> dict[str, float]:
    result = prometheus.query(
        f'pipeline_feature:tritonrepo_feature_psi:30m{{pipeline="{PIPELINE}"}}'
    )
    return {s["metric"]["feature"]: float(s["value"][1]) for s in result}


def drift_alerts(prometheus: Prometheus) -> set[tuple[str, str]]:
    """(pipeline, feature) of the TritonrepoFeatureDrift alerts firing now."""
    return {
        (a["labels"]["pipeline"], a["labels"]["feature"])
        for a in prometheus.api("alerts")["alerts"]
        if a["labels"]["alertname"] == "TritonrepoFeatureDrift" and a["state"] == "firing"
    }


def test_the_server_exports_the_profiles_reference_shares(server, prometheus):
    """tritonrepo_feature_reference_share per bin is the profile file's share."""
    profile = read_profile(MODEL_REPOSITORY / PIPELINE / PROFILE_FILE)

    def exported() -> dict[tuple[str, str], float]:
        result = prometheus.query(
            f'pipeline_feature_bin:tritonrepo_feature_reference_share:max{{pipeline="{PIPELINE}"}}'
        )
        return {(s["metric"]["feature"], s["metric"]["bin"]): float(s["value"][1]) for s in result}

    wait_for("reference shares scraped", lambda: len(exported()) > 0, DEADLINE_S)
    expected = {
        (name, f"{i:02d}"): share
        for name, feature in profile.features.items()
        for i, share in enumerate(feature.shares)
    }
    assert exported() == pytest.approx(expected)
    assert set(profile.features) == {"history_length", "oov_rate"}


def test_reference_stream_is_silent_and_shifted_ids_fire_the_alert(server, prometheus):
    """The reference stream: PSI < 0.1 for every feature, no alert. The shifted stream: the
    alert fires for oov_rate only; every request of both streams is answered."""
    with Stream(server.options.http_url, shift=0) as reference:
        time.sleep(SETTLE_S)
        wait_for("PSI of both features", lambda: len(psi_by_feature(prometheus)) == 2, DEADLINE_S)
        watched_until = time.monotonic() + WATCH_S
        worst: dict[str, float] = {}
        while time.monotonic() < watched_until:
            for feature, value in psi_by_feature(prometheus).items():
                worst[feature] = max(worst.get(feature, 0.0), value)
            assert drift_alerts(prometheus) == set()
            time.sleep(1.0)
    print(f"\nreference stream: {dict(reference.counts)}, worst PSI {worst}")
    assert set(reference.counts) == {"ok"}, reference.counts
    assert max(worst.values()) < 0.1, worst

    with Stream(server.options.http_url, shift=SHIFT) as shifted:
        took = wait_for(
            "TritonrepoFeatureDrift for oov_rate",
            lambda: (PIPELINE, "oov_rate") in drift_alerts(prometheus),
            DEADLINE_S,
        )
        psi = psi_by_feature(prometheus)
        firing = drift_alerts(prometheus)
    print(f"shifted stream: {dict(shifted.counts)}, firing after {took:.1f} s, PSI {psi}")
    assert set(shifted.counts) == {"ok"}, shifted.counts
    assert firing == {(PIPELINE, "oov_rate")}
    assert psi["oov_rate"] > 0.25 > psi["history_length"], psi
    # One item per request ctr_preprocess answered, as Triton itself counts them (the
    # supervisor's probes included), once both are scraped after the last request.
    counted = (
        f'sum(tritonrepo_feature_bin_total{{pipeline="{PIPELINE}",feature="oov_rate"}})'
        f' - sum(nv_inference_request_success{{model="{spec.PREPROCESS_MODEL}"}})'
    )
    wait_for("items = requests", lambda: float(prometheus.query(counted)[0]["value"][1]) == 0,
             DEADLINE_S)  # fmt: skip
