"""Faults on a real server: a step unloaded mid-flight, a version that fails to load
during a rollout under load, clients that disconnect or time out, queue timeouts that drain a
queue, the sessions gauge, and a restart under load that retrying clients ride out.

Every answer is checked against the server's own answers from before the fault (embeddings to
cosine ≥ ``SAME``, rankings exactly); every wait is bounded by a deadline in seconds. The restart
test runs last: it stops and starts the module's server on the same ports.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from benchmarks.serving.priority import priority_levels
from tests.conftest import wait_for
from tritonrepo.ctr import spec as ctr_spec
from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.server.launcher import TritonServer
from tritonrepo.server.processes import metric_values
from tritonrepo.text import spec
from tritonrepo_client import (
    ClientError,
    RankingClient,
    RepositoryClient,
    RolloutError,
    ServerUnreachable,
    SessionClient,
    TritonConnection,
)
from tritonrepo_client.control.rollout import rollout

pytestmark = pytest.mark.server
CONTROL_SERVER_MODELS = (spec.ENSEMBLE, ctr_spec.RANKING_ENSEMBLE, ctr_spec.SESSION_MODEL)

TEXTS = [
    "A man is eating food.",
    "Faults must not take the server down.",
    "Zürich and München are cities.",
    "short",
]
SAME = 1 - 1e-5  # min cosine between an answer and the same text's answer before the fault
REQUEST_DEADLINE_S = 30.0  # network timeout of every client here: a request never hangs longer
DRAIN_DEADLINE_S = 60.0  # for queues to empty once the load stops
RETRY_DEADLINE_S = 180.0  # a retrying client gives up on a request after this long
TIMEOUT_ERROR = "Request timeout expired"  # Triton's queue-policy rejection (UNAVAILABLE / 503)
HISTORY = [12, 7, 981, 4000, 5]
CANDIDATES = [5, 66, 981, 4000, 17, 250, 3, 9000]


# --- helpers ----------------------------------------------------------------------------------
def metrics(server: TritonServer, name: str) -> dict[str, float]:
    """``{label set: value}`` of metric ``name`` from the server's Prometheus endpoint."""
    return metric_values(server.options.metrics_url, name, REQUEST_DEADLINE_S)


def pending_requests(server: TritonServer) -> float:
    """Requests queued in all models (``nv_inference_pending_request_count``, summed)."""
    return sum(metrics(server, "nv_inference_pending_request_count").values())


def repo_for(server: TritonServer) -> RepositoryClient:
    return RepositoryClient(server.options.http_url, "http", key=server.options.repository_key)


def embed(server: TritonServer, texts: list[str], protocol: str = "http") -> np.ndarray:
    """One text_embedding request on a new connection (no metadata calls before it), FP32
    [len(texts), 384]."""
    url = server.options.url(protocol)
    with TritonConnection(url, protocol, timeout_s=REQUEST_DEADLINE_S) as conn:
        text = np.array([[t.encode()] for t in texts], dtype=object)
        return conn.infer(spec.ENSEMBLE, {"TEXT": text}, ["EMBEDDING"])["EMBEDDING"]


def matches(embeddings: np.ndarray, reference: np.ndarray) -> bool:
    return bool(((embeddings * reference).sum(axis=1) >= SAME).all())


def assert_serving(server: TritonServer, reference: np.ndarray) -> None:
    """Live, ready, the same processes, and correct answers over both protocols."""
    assert server.process is not None and server.process.poll() is None, "tritonserver exited"
    checks = server.check_health()
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    for protocol in ("http", "grpc"):
        assert matches(embed(server, TEXTS, protocol), reference), protocol


@dataclass
class Outcome:
    """One request: when it was sent and answered (monotonic s), and its error if any."""

    sent: float
    done: float
    error: str | None = None


@dataclass
class Load:
    """Closed-loop workers calling ``call(protocol)`` until stopped; every outcome is kept.

    ``call`` raises on a wrong answer or an error; the threads are joined with a deadline."""

    call: Callable[[str], None]
    protocols: tuple[str, ...] = ("http", "http", "grpc", "grpc")
    outcomes: list[Outcome] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def worker(self, protocol: str) -> None:
        while not self.stop.is_set():
            sent = time.monotonic()
            error = None
            try:
                self.call(protocol)
            except Exception as exc:  # recorded and judged by the test
                error = f"{type(exc).__name__}: {exc}"
            with self.lock:
                self.outcomes.append(Outcome(sent, time.monotonic(), error))
            if error:
                time.sleep(0.05)  # no busy loop while a model is away

    def __enter__(self) -> Load:
        self.threads = [
            threading.Thread(target=self.worker, args=(p,), daemon=True) for p in self.protocols
        ]
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=REQUEST_DEADLINE_S + 5)
        hung = [t for t in self.threads if t.is_alive()]
        assert not hung, f"{len(hung)} client threads still waiting after the deadline"

    def failures(self) -> list[Outcome]:
        with self.lock:
            return [o for o in self.outcomes if o.error]

    def sent_after(self, moment: float) -> int:
        """Outcomes (answers and errors) of requests sent after ``moment`` (time.monotonic)."""
        with self.lock:
            return sum(o.sent > moment for o in self.outcomes)

    def wait_outcomes(self, what: str, moment: float, count: int = 4) -> None:
        """Wait until ``count`` requests sent after ``moment`` have their outcome (each worker
        about one), for at most ``REQUEST_DEADLINE_S`` seconds.

        Raises:
            AssertionError: not within that deadline (``what`` says what was awaited).
        """
        wait_for(what, lambda: self.sent_after(moment) >= count, REQUEST_DEADLINE_S)


class WrongAnswer(AssertionError):
    """A request was answered, but not with the expected result."""


def embedding_call(server: TritonServer, reference: np.ndarray) -> Callable[[str], None]:
    """A :class:`Load` call: embed ``TEXTS`` and compare with ``reference``."""

    def call(protocol: str) -> None:
        if not matches(embed(server, TEXTS, protocol), reference):
            raise WrongAnswer("embedding differs from the one before the fault")

    return call


@pytest.fixture(scope="module")
def reference(control_server) -> np.ndarray:
    """The server's embeddings of ``TEXTS`` before any fault, FP32 [4, 384]."""
    return embed(control_server, TEXTS)


def settled_stubs(server: TritonServer) -> dict[str, int]:
    """``{instance: stub pid}`` once every instance has one stub: a stub of a model unloaded by
    an earlier test can still be exiting beside its reloaded successor (waits up to
    ``DRAIN_DEADLINE_S``)."""

    def one_each() -> bool:
        instances = [s.instance for s in server.stub_processes()]
        return len(instances) == len(set(instances))

    wait_for("one stub per model instance", one_each, DRAIN_DEADLINE_S)
    return {s.instance: s.pid for s in server.stub_processes()}


# --- a step unloaded while its ensemble has requests in flight ---------------------------------
def test_unloading_a_step_mid_flight_fails_cleanly_and_a_reload_serves(control_server, reference):
    # Triton 2.51 takes the ensemble down with its step: "Request for unknown model:
    # 'text_embedding' has no available versions" (or the step itself is named).
    step_gone = re.compile(
        rf"unknown model: '({spec.ENSEMBLE}|{spec.NORMALIZE_MODEL})'"
        rf"|{spec.NORMALIZE_MODEL}.*(not found|not ready|unavailable)",
        re.I,
    )
    with Load(embedding_call(control_server, reference)) as load, repo_for(control_server) as repo:
        load.wait_outcomes("answers before the unload", 0.0)  # requests in flight at every step
        repo.unload(spec.NORMALIZE_MODEL)
        repo.wait_until(spec.NORMALIZE_MODEL, [1], timeout_s=DRAIN_DEADLINE_S)
        unloaded = time.monotonic()
        with pytest.raises(ClientError) as gone:  # deterministic: sent while the step is gone
            embed(control_server, TEXTS)
        assert step_gone.search(str(gone.value)), str(gone.value)
        assert control_server.check_health(live_only=True)[0].ok
        load.wait_outcomes("requests meeting the missing step", unloaded)
        repo.load(spec.ENSEMBLE)  # loading the ensemble loads its missing step
        reloaded = time.monotonic()
        load.wait_outcomes("answers after the reload", reloaded)
    errors = load.failures()
    unclear = [o for o in errors if not step_gone.search(o.error or "")]
    assert not unclear, f"errors that do not name the missing step: {unclear[:3]}"
    assert max(o.done - o.sent for o in load.outcomes) < REQUEST_DEADLINE_S
    after = [o for o in load.outcomes if o.sent > reloaded]
    assert after and not [o for o in after if o.error], "requests after the reload must succeed"
    assert_serving(control_server, reference)
    print(
        f"{len(load.outcomes)} requests, {len(errors)} failed while the step was unloaded: "
        f"{sorted({o.error for o in errors})}"
    )


# --- a version that fails to load during a rollout, under load ---------------------------------
def test_corrupt_version_uploaded_by_rollout_leaves_the_serving_version(control_server, tmp_path):
    """ctr_model version 9 is a model.onnx of garbage, uploaded through the rollout tool while
    ctr_ranking is under load: the rollout fails at staging and version 1 keeps answering."""
    with RankingClient(control_server.options.http_url, timeout_s=REQUEST_DEADLINE_S) as client:
        before = client.rank(HISTORY, CANDIDATES, top_k=len(CANDIDATES))
    source = tmp_path / ctr_spec.CORE_MODEL
    shutil.copytree(MODEL_REPOSITORY / ctr_spec.CORE_MODEL / "1", source / "1")
    (source / "9").mkdir()
    (source / "9" / "model.onnx").write_bytes(b"not an onnx model\x00" * 4096)

    def rank(protocol: str) -> None:
        url = control_server.options.url(protocol)
        with RankingClient(url, protocol, timeout_s=REQUEST_DEADLINE_S) as client:
            got = client.rank(HISTORY, CANDIDATES, top_k=len(CANDIDATES))
        same_ids = np.array_equal(got.item_ids, before.item_ids)
        if not (same_ids and np.allclose(got.scores, before.scores, atol=1e-6)):
            raise WrongAnswer(f"ranking changed: {got.as_dict()} vs {before.as_dict()}")

    with Load(rank) as load, repo_for(control_server) as repo:
        load.wait_outcomes("answers before the rollout", 0.0)
        with pytest.raises(RolloutError, match=r"failed at stage.*restored the previous policy"):
            rollout(repo, ctr_spec.CORE_MODEL, 9, source_dir=source)
        load.wait_outcomes("answers after the failed rollout", time.monotonic(), count=6)
        assert repo.versions(ctr_spec.CORE_MODEL) == [1]
        assert repo.ready(ctr_spec.RANKING_ENSEMBLE) and repo.ready(ctr_spec.SESSION_MODEL)
    failures = load.failures()
    assert len(load.outcomes) >= 10, "too little load to judge"
    assert not failures, f"{len(failures)} of {len(load.outcomes)} failed: {failures[:3]}"
    rank("grpc")


# --- clients that disconnect mid-request -------------------------------------------------------
def big_batch() -> list[str]:
    """64 texts of about 250 tokens: a request of seconds on a busy 2-core machine."""
    words = [
        "the",
        "served",
        "ensemble",
        "keeps",
        "answering",
        "while",
        "clients",
        "come",
        "and",
        "go",
    ]
    return [" ".join(words[(i + j) % len(words)] for j in range(240)) for i in range(64)]


def http_request_bytes(server: TritonServer, texts: list[str]) -> bytes:
    body = json.dumps(
        {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [len(texts), 1], "data": texts}]}
    ).encode()
    head = (
        f"POST /v2/models/{spec.ENSEMBLE}/infer HTTP/1.1\r\n"
        f"Host: {server.options.http_url}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    return head + body


def test_clients_that_disconnect_mid_request_leave_the_server_healthy(control_server, reference):
    stubs = settled_stubs(control_server)
    payload = http_request_bytes(control_server, big_batch())
    address = (control_server.options.client_host, control_server.options.http_port)
    for cut in (len(payload), len(payload) // 2, len(payload), len(payload)):
        with socket.create_connection(address, timeout=REQUEST_DEADLINE_S) as sock:
            sock.sendall(payload[:cut])  # all of it (then gone before the answer) or half
    grpc = grpcclient.InferenceServerClient(control_server.options.grpc_url)
    texts = np.array([[t.encode()] for t in big_batch()], dtype=object)
    cancelled = 0
    try:
        for _ in range(3):
            tensor = grpcclient.InferInput("TEXT", list(texts.shape), "BYTES")
            tensor.set_data_from_numpy(texts)
            try:
                grpc.infer(spec.ENSEMBLE, [tensor], client_timeout=0.05)
            except InferenceServerException as exc:
                assert "Deadline" in str(exc) or "DEADLINE" in str(exc.status()), exc
                cancelled += 1
    finally:
        grpc.close()
    assert cancelled == 3, "a 64-text batch answered within 50 ms: the cancellation was not tested"
    wait_for("empty queues", lambda: pending_requests(control_server) == 0, DRAIN_DEADLINE_S)
    assert_serving(control_server, reference)
    assert settled_stubs(control_server) == stubs, "a stub died"


# --- clients that time out: queue timeouts -----------------------------------------------------
TIMED_REQUESTS_MAX = 60  # requests with a 1 ms timeout sent at most
REJECTIONS_WANTED = 6  # rejections that show the override reaches every step's queue


def test_short_client_timeouts_are_rejected_from_the_queue_and_it_drains(control_server, reference):
    """A queue built by 8 clients sending batches without a timeout; requests with a 1 ms queue
    timeout are rejected by Triton while the others are all served. Only a model with priority
    levels applies a request's timeout (tritonrepo/server/queue_policy.py): the steps keep
    Triton's plain queue, and the encoder is reloaded with the levels that
    ``priority_levels = 2`` writes, whose queue policy allows the override; the ensemble passes
    the timeout to every step."""
    with repo_for(control_server) as repo:
        for model in (spec.TOKENIZE_MODEL, spec.NORMALIZE_MODEL, ctr_spec.CORE_MODEL):
            batching = repo.config(model)["dynamic_batching"]
            assert not batching.get("priority_levels") and "default_queue_policy" not in batching
        with priority_levels(repo, spec.ENCODER_MODEL) as config:
            policy = config["dynamic_batching"]["default_queue_policy"]
            assert policy["allow_timeout_override"]
            assert int(policy["default_timeout_microseconds"]) > 0
            rejected_short_timeouts(control_server, reference)


def rejected_short_timeouts(control_server: TritonServer, reference) -> None:
    """Requests with a 1 ms timeout sent behind a queue: at least ``REJECTIONS_WANTED`` refused
    with Triton's timeout error, nothing else failed, and the queues drain to right answers."""
    batch = big_batch()[:8]

    def flood(protocol: str) -> None:
        embed(control_server, batch, protocol)

    client = httpclient.InferenceServerClient(
        control_server.options.http_url, network_timeout=REQUEST_DEADLINE_S
    )
    outcomes: list[str] = []
    with Load(flood, protocols=("http",) * 8) as load:
        # Each request goes out right after a queue was seen; whether one lands behind it is
        # up to the batchers, so the test sends until REJECTIONS_WANTED were rejected.
        for text in (TEXTS * 20)[:TIMED_REQUESTS_MAX]:
            wait_for("a queue", lambda: pending_requests(control_server) >= 2, DRAIN_DEADLINE_S)
            tensor = httpclient.InferInput("TEXT", [1, 1], "BYTES")
            tensor.set_data_from_numpy(np.array([[text.encode()]], dtype=object))
            try:
                client.infer(spec.ENSEMBLE, [tensor], timeout=1000)  # µs
                outcomes.append("served")
            except InferenceServerException as exc:
                outcomes.append(str(exc))
            if sum(TIMEOUT_ERROR in o for o in outcomes) >= REJECTIONS_WANTED:
                break
    client.close()
    assert not load.failures(), f"requests without a timeout failed: {load.failures()[:3]}"
    unexpected = [o for o in outcomes if o != "served" and TIMEOUT_ERROR not in o]
    assert not unexpected, unexpected
    rejected = sum(TIMEOUT_ERROR in o for o in outcomes)
    assert rejected >= REJECTIONS_WANTED, f"only {rejected} of {len(outcomes)}: {outcomes}"
    wait_for("empty queues", lambda: pending_requests(control_server) == 0, DRAIN_DEADLINE_S)
    assert matches(embed(control_server, TEXTS), reference)
    print(f"{rejected} of {len(outcomes)} requests with a 1 ms timeout rejected under load")


# --- the sessions gauge ------------------------------------------------------------------------
def sessions_active(server: TritonServer) -> float:
    return sum(metrics(server, "tritonrepo_sessions_active").values())


def test_sessions_gauge_counts_started_sessions_until_they_end(control_server):
    gauges = metrics(control_server, "tritonrepo_sessions_active")
    assert len(gauges) == 2 and all('model="ctr_session"' in k for k in gauges), gauges
    base = sessions_active(control_server)
    with SessionClient(control_server.options.grpc_url, "grpc") as client:
        sessions = [client.session(f"faults-{i}") for i in range(3)]
        for session in sessions:
            session.send(12, CANDIDATES)
        assert sessions_active(control_server) == base + 3
        sessions[0].send(7, CANDIDATES, end=True)
        assert sessions_active(control_server) == base + 2
        for session in sessions[1:]:
            session.send(7, CANDIDATES, end=True)
    assert sessions_active(control_server) == base


# --- restart under load (last: it restarts the module's server) --------------------------------
TRANSIENT = re.compile(
    r"unavailable|not ready|not found|unknown model|stopping|shutting|connection|socket|reset|"
    r"refused|timed out|timeout|\b50[23]\b|broken pipe|eof",
    re.I,
)


def test_restart_under_load_loses_nothing_for_retrying_clients(control_server, reference):
    """Clients retry on connection errors and UNAVAILABLE with exponential backoff (0.1 s to
    2 s) until ``RETRY_DEADLINE_S``; the server is stopped and started on the same ports
    while they run. Every request must end with the right answer."""
    requests_per_client = 12
    results: dict[str, list[int]] = {}  # client -> attempts per request (0: gave up)
    errors: list[str] = []
    started = threading.Event()
    lock = threading.Lock()

    def client(name: str, protocol: str) -> None:
        attempts_per_request = []
        for i in range(requests_per_client):
            deadline, delay, attempts = time.monotonic() + RETRY_DEADLINE_S, 0.1, 0
            while True:
                attempts += 1
                try:
                    got = embed(control_server, TEXTS, protocol)
                    if not matches(got, reference):
                        raise WrongAnswer("embedding differs after the restart")
                    break
                except (ServerUnreachable, ClientError) as exc:
                    transient = isinstance(exc, ServerUnreachable) or TRANSIENT.search(str(exc))
                    if not transient or time.monotonic() + delay > deadline:
                        with lock:
                            errors.append(f"{name} request {i}: {exc}")
                        attempts = 0
                        break
                    time.sleep(delay)
                    delay = min(2 * delay, 2.0)
            attempts_per_request.append(attempts)
            if i == 1:
                started.set()
            time.sleep(0.3)  # requests keep coming across the whole restart
        with lock:
            results[name] = attempts_per_request

    threads = [
        threading.Thread(target=client, args=(f"{p}-{k}", p), daemon=True)
        for p in ("http", "grpc")
        for k in range(2)
    ]
    for thread in threads:
        thread.start()
    assert started.wait(REQUEST_DEADLINE_S)
    down = time.monotonic()
    control_server.stop()
    control_server.start()  # same options, same ports
    restart_s = time.monotonic() - down
    for thread in threads:
        thread.join(timeout=RETRY_DEADLINE_S + REQUEST_DEADLINE_S)
    assert not [t for t in threads if t.is_alive()], "a retrying client hung"
    assert not errors, errors[:3]
    attempts = [a for per_client in results.values() for a in per_client]
    assert len(attempts) == 4 * requests_per_client and all(a >= 1 for a in attempts)
    assert max(attempts) > 1, "no request was retried: the restart did not happen under load"
    assert_serving(control_server, reference)
    print(
        f"restart took {restart_s:.1f} s; {len(attempts)} requests all answered correctly, "
        f"{sum(a > 1 for a in attempts)} after retries (max {max(attempts)} attempts)"
    )
