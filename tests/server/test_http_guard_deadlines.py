"""The HTTP guard's deadlines and probes, against a real tritonserver behind the guard (the
launcher's ``http_guard``, as ``make serve`` runs it):

* a caller's deadline reaches Triton: a request whose caller gave up is dropped from the
  model's queue instead of run (the model's own counters say so), one that waits is served;
* readiness through the guard answers during a rollout and a rollback under load (Triton 2.51
  blocks the HTTP thread that runs a model load, and with it the connections it serves);
* nginx itself (a stand-in upstream, no Triton): a POST the guard gave up on is not sent again,
  a probe that gets no answer is tried again on a new connection.
"""

from __future__ import annotations

import dataclasses
import http.client
import http.server
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest

from tests.conftest import require_artifacts, server_options
from tests.server.test_http_guard import require_guard
from tritonrepo.paths import BUILD_DIR
from tritonrepo.server.http_guard import HttpGuard
from tritonrepo.server.launcher import TritonServer, free_port
from tritonrepo.server.processes import metric_values
from tritonrepo.text import spec
from tritonrepo_client import EmbeddingClient, RepositoryClient, TritonConnection, rollback
from tritonrepo_client.control.rollout import rollout
from tritonrepo_client.errors import DeadlineExceeded

pytestmark = pytest.mark.server
RUN_DIR = BUILD_DIR / "test-logs" / "http-guard-deadlines"

SLOW = "guard_slow"  # a Python model that takes SLOW_S per batch of one request
SLOW_S = 2.0
GIVE_UP_S = 1.0  # the impatient callers' deadline: half a batch
SLOW_MODEL_PY = b"""
import json
import re
import time
from pathlib import Path

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        params = json.loads(args["model_config"])["parameters"]
        self.marks = Path(params["marks"]["string_value"])
        self.seconds = float(params["seconds"]["string_value"])
        self.batches = 0

    def execute(self, requests):
        self.batches += 1
        (self.marks / f"batch-{self.batches}").touch()
        time.sleep(self.seconds)
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy())]
            )
            for r in requests
        ]
"""


def slow_config(marks: Path) -> dict:
    """One instance, batches of one request, a queue whose timeout a request may lower."""
    return {
        "name": SLOW,
        "backend": "python",
        "max_batch_size": 1,
        "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [1]}],
        "output": [{"name": "Y", "data_type": "TYPE_FP32", "dims": [1]}],
        "instance_group": [{"kind": "KIND_CPU", "count": 1}],
        "dynamic_batching": {
            "default_queue_policy": {
                "allow_timeout_override": True,
                "default_timeout_microseconds": 3_600_000_000,
            }
        },
        "parameters": {
            "marks": {"string_value": str(marks)},
            "seconds": {"string_value": str(SLOW_S)},
        },
    }


def wait_for(what: str, condition: Callable[[], bool], deadline_s: float) -> None:
    """Poll ``condition`` every 0.05 s until true.

    Raises:
        AssertionError: not true within ``deadline_s`` seconds (``what`` says what).
    """
    deadline = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {deadline_s:.0f} s")
        time.sleep(0.05)


@pytest.fixture(scope="module")
def server() -> Iterator[TritonServer]:
    """text_embedding behind the guard, as `make serve` runs it."""
    require_artifacts()
    require_guard()
    options = server_options("test_http_guard_deadlines", models=(spec.ENSEMBLE,), http_guard=True)
    with TritonServer(options) as s:
        yield s


def repo_for(server: TritonServer) -> RepositoryClient:
    """The repository API through the guard, over HTTP (a load blocks one Triton HTTP thread)."""
    return RepositoryClient(server.options.http_url, "http", key=server.options.repository_key)


def infer_slow(port: int, x: float, headers: dict[str, str], deadline_s: float):
    """One JSON request to the slow model on 127.0.0.1:port: ``(status, answer)``, or None when
    the caller gave up at ``deadline_s`` (socket timeout)."""
    body = {"inputs": [{"name": "X", "datatype": "FP32", "shape": [1, 1], "data": [x]}]}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=deadline_s)
    try:
        conn.request("POST", f"/v2/models/{SLOW}/infer", json.dumps(body), headers)
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    except TimeoutError:
        return None
    finally:
        conn.close()


def slow_counts(server: TritonServer) -> dict[str, int]:
    """The slow model's statistics (Triton's own, read directly): requests that succeeded, that
    failed (a queue timeout is one), and batches executed."""
    conn = http.client.HTTPConnection("127.0.0.1", server.triton_http_port, timeout=30)
    try:
        conn.request("GET", f"/v2/models/{SLOW}/stats")
        stats = json.loads(conn.getresponse().read())["model_stats"][0]
    finally:
        conn.close()
    inference = stats["inference_stats"]
    return {
        "success": int(inference["success"]["count"]),
        "fail": int(inference["fail"]["count"]),
        "executions": int(stats["execution_count"]),
    }


def test_a_caller_that_gives_up_leaves_no_work_and_one_that_waits_is_served(server, tmp_path):
    """The model busy for SLOW_S with one request and another queued behind it; then, through
    the guard, a caller with a deadline of GIVE_UP_S (the Triton-Timeout-Ms header, and this
    package's client with ``timeout_s``) gives up, and one with a long deadline waits. Triton
    rejects the impatient requests from the queue (``fail``) and never executes them; the
    patient one is answered."""
    marks = tmp_path / "marks"
    marks.mkdir()
    with repo_for(server) as repo:
        repo.load(SLOW, slow_config(marks), {"file:1/model.py": SLOW_MODEL_PY})
    direct, guard = server.triton_http_port, server.options.http_port
    before = slow_counts(server)
    answers: dict[float, object] = {}

    def busy(x: float) -> None:  # direct to Triton, no deadline
        answers[x] = infer_slow(direct, x, {}, deadline_s=60)

    first = threading.Thread(target=busy, args=(1.0,))
    first.start()
    wait_for("the first batch", lambda: any(marks.iterdir()), deadline_s=30)
    second = threading.Thread(target=busy, args=(2.0,))  # the next batch, waiting for the instance
    second.start()
    wait_for("a request waiting", lambda: queued(server) >= 1, deadline_s=30)

    header = {"Triton-Timeout-Ms": str(int(GIVE_UP_S * 1000))}
    assert infer_slow(guard, 3.0, header, deadline_s=GIVE_UP_S) is None, "answered within 1 s"
    with (
        TritonConnection(server.options.http_url, timeout_s=GIVE_UP_S) as conn,
        pytest.raises(DeadlineExceeded),
    ):
        conn.infer(SLOW, {"X": np.array([[4.0]], dtype=np.float32)}, ["Y"], retry=False)
    patient = infer_slow(guard, 5.0, {"Triton-Timeout-Ms": "60000"}, deadline_s=60)
    first.join(60)
    second.join(60)

    assert patient is not None and patient[0] == 200, patient
    assert patient[1]["outputs"][0]["data"] == [5.0]
    assert [answers[x][1]["outputs"][0]["data"] for x in (1.0, 2.0)] == [[1.0], [2.0]]
    wait_for("the counters", lambda: slow_counts(server)["fail"] >= before["fail"] + 2, 30)
    after = slow_counts(server)
    ran = after["executions"] - before["executions"]
    assert after["fail"] - before["fail"] == 2, (before, after)
    assert (after["success"] - before["success"], ran) == (3, 3), (before, after)
    assert len(list(marks.iterdir())) == 3, "a request whose caller gave up was executed"


def queued(server: TritonServer) -> int:
    """Requests of the slow model waiting in its queue (``nv_inference_pending_request_count``)."""
    values = metric_values(server.options.metrics_url, "nv_inference_pending_request_count", 10)
    return int(sum(v for labels, v in values.items() if f'model="{SLOW}"' in labels))


# --- readiness during a rollout ------------------------------------------------------------------
POLL_EVERY_S = 0.02
POLL_DEADLINE_S = 2.0  # a probe's timeout (Kubernetes: timeoutSeconds)
CYCLES = 2  # rollout + rollback, each loading a version over HTTP


def test_readiness_through_the_guard_answers_during_rollout_and_rollback(server):
    """Probes of /v2/models/text_embedding/ready and /v2/health/ready through the guard, each on
    a new connection every 20 ms with a 2 s deadline (as a kubelet does), while 3 clients embed
    texts and the encoder is rolled out to version 2 and back twice over HTTP: no probe fails,
    no inference fails."""
    stop = threading.Event()
    probes: list[tuple[str, str | None]] = []
    failures: list[str] = []

    def probe(path: str) -> None:
        while not stop.is_set():
            conn = http.client.HTTPConnection("127.0.0.1", server.options.http_port,
                                              timeout=POLL_DEADLINE_S)  # fmt: skip
            try:
                conn.request("GET", path)
                status = conn.getresponse().status
                probes.append((path, None if status == 200 else f"status {status}"))
            except OSError as exc:
                probes.append((path, f"{type(exc).__name__}: {exc}"))
            finally:
                conn.close()
            stop.wait(POLL_EVERY_S)

    def embed(protocol: str) -> None:
        with EmbeddingClient(server.options.url(protocol), protocol, timeout_s=60) as client:
            while not stop.is_set():
                try:
                    client.embed(["readiness under load"])
                except Exception as exc:  # recorded and judged below
                    failures.append(f"{type(exc).__name__}: {exc}")

    targets = [(probe, (f"/v2/models/{spec.ENSEMBLE}/ready",)), (probe, ("/v2/health/ready",)),
               (embed, ("http",)), (embed, ("http",)), (embed, ("grpc",))]  # fmt: skip
    threads = [threading.Thread(target=t, args=a, daemon=True) for t, a in targets]
    for thread in threads:
        thread.start()
    try:
        wait_for("probes", lambda: len(probes) >= 20, deadline_s=30)
        with repo_for(server) as repo:
            for _ in range(CYCLES):
                rollout(repo, spec.ENCODER_MODEL, 2)
                rollback(repo, spec.ENCODER_MODEL)
            assert repo.versions(spec.ENCODER_MODEL) == [1]
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=90)
    assert not any(t.is_alive() for t in threads), "a client thread outlived its deadline"
    failed = [p for p in probes if p[1]]
    assert not failed, f"{len(failed)} of {len(probes)} probes failed, e.g. {failed[:3]}"
    assert len(probes) >= 100
    assert not failures, f"{len(failures)} inferences failed, e.g. {failures[:3]}"
    print(f"{len(probes)} probes through the guard, {CYCLES} rollouts and rollbacks: 0 failed")


# --- nginx's retries (a stand-in upstream that records what reaches it) ------------------------
class _Stalling(http.server.BaseHTTPRequestHandler):
    """Counts requests by path; the first of each path gets no answer for ``stall_s``."""

    protocol_version = "HTTP/1.1"
    seen: ClassVar[dict[str, int]] = {}
    stall_s = 3.0
    lock = threading.Lock()

    def answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        with self.lock:
            count = self.seen[self.path] = self.seen.get(self.path, 0) + 1
        if count == 1:
            time.sleep(self.stall_s)
        body = b'{"ok":true}'
        try:  # the guard has closed the connection of a stalled request by now
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            self.close_connection = True

    do_GET = do_POST = answer

    def log_message(self, *args) -> None:
        pass


def test_a_post_the_guard_gave_up_on_is_not_sent_again_and_a_stalled_probe_is_retried():
    """Guard timeouts shortened (upstream 2 s, probe tries 0.5 s) before an upstream that
    stalls 3 s on the first request of each path: the inference POST is answered 503 after the
    guard's wait and reached the upstream once; the readiness GET is answered 200 by a second
    try on a new connection."""
    require_guard()
    upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Stalling)
    _Stalling.seen = {}
    thread = threading.Thread(target=upstream.serve_forever, daemon=True)
    thread.start()
    guard = HttpGuard("127.0.0.1", free_port(), upstream.server_address[1], RUN_DIR / "stalling")
    guard.settings = dataclasses.replace(
        guard.settings, max_request_timeout_s=1, upstream_timeout_s=2, probe_timeout_ms=500
    )
    infer = "/v2/models/m/infer"
    ready = "/v2/models/m/ready"
    body = json.dumps({"inputs": [{"name": "X", "datatype": "FP32", "shape": [1], "data": [1]}]})
    try:
        with guard:
            conn = http.client.HTTPConnection("127.0.0.1", guard.listen_port, timeout=30)
            conn.request("POST", infer, body)
            response = conn.getresponse()
            assert response.status == 503 and b"did not answer" in response.read()
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", guard.listen_port, timeout=30)
            conn.request("GET", ready)
            assert conn.getresponse().status == 200
            conn.close()
    finally:
        upstream.shutdown()
        upstream.server_close()
    assert _Stalling.seen == {infer: 1, ready: 2}, _Stalling.seen


# --- the guard's timeouts against the queues' ----------------------------------------------------
def test_the_guard_waits_longer_than_any_queue_timeout_it_sends() -> None:
    """No queue of the repository's configs (read from the .pbtxt files) and no policy a
    description can ask for keeps a request longer than the guard's cap, so a request without a
    Triton-Timeout-Ms header needs no timeout of the guard's and goes on unchanged; the guard
    waits longer than that cap for Triton's answer; settings that would wait less are
    refused."""
    from tritonrepo.paths import MODEL_REPOSITORY
    from tritonrepo.server import http_guard_config, queue_policy

    configs = [
        *MODEL_REPOSITORY.glob("*/config.pbtxt"),
        *MODEL_REPOSITORY.glob("*/configs/*.pbtxt"),
    ]
    in_configs = [
        int(value)
        for path in configs
        for value in re.findall(r"default_timeout_microseconds:\s*(\d+)", path.read_text())
    ]
    policies = (queue_policy.CORE_CPU, queue_policy.CORE_GPU, queue_policy.PLAIN)
    in_policies = [
        level.timeout_us for p in policies for level in (p.default, *p.per_level.values())
    ]
    longest_us = max([*in_configs, *in_policies])
    assert longest_us == 600_000_000  # the bulk level's, of a core that asks for priorities
    settings = http_guard_config.GuardSettings(listen="8080", upstream="127.0.0.1:8000")
    conf = http_guard_config.render(settings, http_guard_config.CONTAINER_PATHS)
    sent_us = int(re.search(r"js_var \$guard_max_timeout_us (\d+);", conf).group(1))
    # The server's wait (its locations for metadata and probes have their own, shorter ones).
    server_wait = re.search(r"^    proxy_read_timeout (\d+)s;", conf, re.M)
    assert sent_us >= longest_us and int(server_wait.group(1)) == settings.upstream_timeout_s
    assert settings.upstream_timeout_s * 1_000_000 > sent_us
    with pytest.raises(ValueError, match="must be longer than"):
        http_guard_config.GuardSettings(
            listen="1", upstream="x:1", max_request_timeout_s=600, upstream_timeout_s=300
        )


def test_a_request_without_a_deadline_header_reaches_triton_byte_for_byte() -> None:
    """The guard rewrites a request body only to carry a caller's Triton-Timeout-Ms; any other
    request (with or without its own timeout) reaches Triton as it was sent, and one with the
    header carries the lower timeout."""
    require_guard()
    upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recording)
    _Recording.bodies = []
    thread = threading.Thread(target=upstream.serve_forever, daemon=True)
    thread.start()
    guard = HttpGuard("127.0.0.1", free_port(), upstream.server_address[1], RUN_DIR / "recording")
    plain = {"inputs": [{"name": "X", "datatype": "FP32", "shape": [1], "data": [1]}]}
    own = {**plain, "parameters": {"timeout": 5_000_000}}
    try:
        with guard:
            for body, headers in ((plain, {}), (own, {}), (plain, {"Triton-Timeout-Ms": "2000"})):
                conn = http.client.HTTPConnection("127.0.0.1", guard.listen_port, timeout=30)
                conn.request("POST", "/v2/models/m/infer", json.dumps(body), headers)
                assert conn.getresponse().status == 200
                conn.close()
    finally:
        upstream.shutdown()
        upstream.server_close()
    sent = [json.loads(b) for b in _Recording.bodies]
    assert _Recording.bodies[:2] == [json.dumps(plain).encode(), json.dumps(own).encode()]
    assert sent[2]["parameters"] == {"timeout": 2_000_000} and sent[2]["inputs"] == plain["inputs"]


class _Recording(http.server.BaseHTTPRequestHandler):
    """An upstream that keeps each POST body and answers 200 ``{}``."""

    protocol_version = "HTTP/1.1"
    bodies: ClassVar[list[bytes]] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        _Recording.bodies.append(self.rfile.read(length))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args) -> None:
        pass
