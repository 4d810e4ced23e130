"""Priority levels and queue limits of the core models, on real servers.

* Every config set of every core model has two priority levels (1 real-time, the default; 2
  bulk) and a bounded queue with a timeout that REJECTs, for each level.
* Under a bulk flood, real-time requests are answered before the bulk ones queued with them
  (ordering only; ``make bench`` reports the latency ratio: ``benchmarks/priority.py``), and
  every real-time answer matches sentence-transformers.
* A full bulk queue refuses requests at once with Triton's "Exceeds maximum queue size"
  (HTTP 503 / gRPC UNAVAILABLE: ``ServerUnavailable``), while real-time requests are served.
* The CLI's ``--priority`` and ``--timeout-us`` reach Triton.
"""

from __future__ import annotations

import copy
import json
import time

import numpy as np
import pytest

from benchmarks.priority import REALTIME_TEXT, BulkFlood, flood
from reference_data.text_corpus import real_texts
from tests.conftest import client_cli, wait_for
from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.server import queue_policy
from tritonrepo.text import spec
from tritonrepo_client import ClientError, EmbeddingClient, RepositoryClient
from tritonrepo_client.model_repository.configs import load_config
from tritonrepo_client.retry import NO_RETRY
from tritonrepo_client.scheduling import BULK, REALTIME

QUEUE_FULL = "Exceeds maximum queue size"
SAME = 0.999  # min cosine to sentence-transformers (the CPU FP32 encoder reaches ~1 - 1e-6)
DEADLINE_S = 120.0


def config_files(model: str) -> list:
    folder = MODEL_REPOSITORY / model
    return [folder / "config.pbtxt", *sorted((folder / "configs").glob("*.pbtxt"))]


def batching_core_models() -> tuple[str, ...]:
    """The core models (read from the configs: :func:`queue_policy.core_models`) that batch
    requests in every config set; a stateful one (``sequence_batching``, ``ctr_session``'s
    plan) has no queue policy in Triton."""
    return tuple(
        m
        for m in queue_policy.core_models()
        if not any(load_config(p).HasField("sequence_batching") for p in config_files(m))
    )


@pytest.mark.parametrize("model", batching_core_models())
def test_every_config_set_has_priority_levels_and_rejecting_bounded_queues(model: str) -> None:
    for path in config_files(model):
        batching = load_config(path).dynamic_batching
        assert batching.priority_levels == 2, path
        assert batching.default_priority_level == REALTIME, path
        policies = {REALTIME: batching.default_queue_policy}
        policies[BULK] = batching.priority_queue_policy[BULK]
        for level, policy in policies.items():
            where = f"{path.relative_to(MODEL_REPOSITORY)} level {level}"
            assert policy.timeout_action == policy.REJECT, where
            assert policy.allow_timeout_override, where
            assert policy.max_queue_size > 0, where
            assert 0 < policy.default_timeout_microseconds <= 3_600_000_000, where
        # Bulk may wait longer and queue deeper than real-time traffic.
        assert policies[BULK].max_queue_size >= policies[REALTIME].max_queue_size, path
        timeouts = [p.default_timeout_microseconds for p in (policies[REALTIME], policies[BULK])]
        assert timeouts[1] >= timeouts[0], path


@pytest.mark.server
@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_realtime_requests_go_ahead_of_a_bulk_flood(triton_server, reference_embed, protocol):
    url = triton_server.options.url(protocol)
    result = flood(url, protocol, real_texts(16), realtime_requests=6, bulk_clients=24)
    assert not result.realtime_errors, result.realtime_errors[:3]
    assert len(result.realtime_ms) == 6
    assert len(result.bulk_ms) >= 6, "the flood never got going"
    realtime, bulk = np.median(result.realtime_ms), np.median(result.bulk_ms)
    print(f"{protocol}: real-time p50 {realtime:.0f} ms, bulk p50 {bulk:.0f} ms")
    assert realtime < bulk, f"real-time p50 {realtime:.0f} ms >= bulk p50 {bulk:.0f} ms"
    expected = reference_embed([REALTIME_TEXT])[0]
    for vector in result.realtime_embeddings:
        assert float(vector @ expected) >= SAME


@pytest.mark.server
def test_a_full_bulk_queue_refuses_at_once_while_realtime_is_served(control_server):
    """The encoder's bulk queue cut to 2 requests (a config override through the load API,
    restored afterwards): 12 bulk clients get immediate "Exceeds maximum queue size"
    refusals; real-time requests sent meanwhile are all served."""
    options = control_server.options
    repo = RepositoryClient(options.http_url, "http", key=options.repository_key)
    original = repo.config(spec.ENCODER_MODEL)
    small = copy.deepcopy(original)
    small["dynamic_batching"]["priority_queue_policy"][str(BULK)]["max_queue_size"] = 2
    realtime_errors: list[str] = []
    repo.load(spec.ENCODER_MODEL, config=small)
    try:
        with (
            BulkFlood(options.grpc_url, "grpc", real_texts(16), clients=12) as bulk,
            EmbeddingClient(options.http_url, "http", retry=NO_RETRY) as realtime,
        ):
            wait_for(  # the flood has filled the bulk queue and got answers
                "a bulk request refused and one served",
                lambda: bool(bulk.failed or (bulk.refused and bulk.served_ms)),
                DEADLINE_S,
            )
            for _ in range(4):
                try:
                    realtime.embed([REALTIME_TEXT], timeout_s=DEADLINE_S)
                except ClientError as exc:
                    realtime_errors.append(str(exc))
    finally:
        repo.load(spec.ENCODER_MODEL, config=original)
        repo.close()
    assert not realtime_errors, realtime_errors
    assert not bulk.failed, bulk.failed[:3]
    assert bulk.refused, "no bulk request was refused with a queue of 2"
    unexpected = [m for _, m in bulk.refused if QUEUE_FULL not in m]
    assert not unexpected, unexpected[:3]
    # Refused at once: faster than any request that was served.
    assert bulk.served_ms, "no bulk request was served"
    assert np.median([ms for ms, _ in bulk.refused]) < min(bulk.served_ms)
    print(
        f"{len(bulk.refused)} refused (p50 {np.median([ms for ms, _ in bulk.refused]):.0f} ms)"
        f", {len(bulk.served_ms)} served (min {min(bulk.served_ms):.0f} ms)"
    )


@pytest.mark.server
def test_cli_priority_and_queue_timeout_reach_triton(triton_server):
    url = triton_server.options.http_url
    ok = client_cli("--url", url, "--priority", "bulk", "--timeout-us", "30000000", "embed", "hi")
    assert ok.returncode == 0, ok.stderr
    assert len(json.loads(ok.stdout.splitlines()[0])["embedding"]) == 384
    # A 1 µs queue timeout behind a flood: Triton rejects it, so the value reached the server.
    with BulkFlood(url, "http", real_texts(16), clients=8) as bulk:
        deadline = time.monotonic() + DEADLINE_S
        while not bulk.served_ms and time.monotonic() < deadline:
            time.sleep(0.2)
        late = client_cli("--url", url, "--timeout-us", "1", "embed", "hello")
    assert late.returncode == 1, late.stdout
    assert "Request timeout expired" in late.stderr, late.stderr
