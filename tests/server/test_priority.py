"""Priority levels and queue limits of a core model that asks for them, on real servers.

The shipped configs keep Triton's plain queue (tests/unit/test_queue_policy.py); here the
text encoder is reloaded with the two levels that ``priority_levels = 2`` in a description
writes (:func:`benchmarks.serving.priority.priority_levels`, the generator's own policy), and:

* under a bulk flood, real-time requests are answered before the bulk ones queued with them
  (ordering only; ``make bench`` reports the latency ratio: ``benchmarks/serving/priority.py``), and
  every real-time answer matches sentence-transformers;
* a full bulk queue refuses requests at once with Triton's "Exceeds maximum queue size"
  (HTTP 503 / gRPC UNAVAILABLE: ``ServerUnavailable``), while real-time requests are served;
* the CLI's ``--priority`` and ``--timeout-us`` reach Triton.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest

from benchmarks.serving.priority import REALTIME_TEXT, BulkFlood, flood, priority_levels
from reference_data.text_corpus import real_texts
from tests.conftest import client_cli, wait_for
from tritonrepo.server import queue_policy
from tritonrepo.server.launcher import TritonServer
from tritonrepo.text import spec
from tritonrepo_client import ClientError, EmbeddingClient, RepositoryClient
from tritonrepo_client.retry import NO_RETRY
from tritonrepo_client.scheduling import BULK, REALTIME

CONTROL_SERVER_MODELS = (spec.ENSEMBLE,)
QUEUE_FULL = "Exceeds maximum queue size"
SAME = 0.999  # min cosine to sentence-transformers (the CPU FP32 encoder reaches ~1 - 1e-6)
DEADLINE_S = 120.0


@contextmanager
def leveled(server: TritonServer) -> Iterator[tuple[RepositoryClient, dict]]:
    """``server``'s text encoder with two priority levels (restored afterwards): the
    repository client and the config it runs."""
    options = server.options
    with (
        RepositoryClient(options.http_url, "http", key=options.repository_key) as repo,
        priority_levels(repo) as config,
    ):
        yield repo, config


@pytest.mark.server
def test_the_levels_loaded_are_the_ones_a_description_asks_for(triton_server) -> None:
    """What the running encoder reports after the reload: two levels, the CPU set's bounded
    REJECT queues, bulk deeper and longer than real-time."""
    with leveled(triton_server) as (repo, _):
        batching = repo.config(spec.ENCODER_MODEL)["dynamic_batching"]
    want = queue_policy.CORE_CPU
    assert int(batching["priority_levels"]) == 2
    assert int(batching["default_priority_level"]) == REALTIME
    levels = {REALTIME: batching["default_queue_policy"],
              BULK: batching["priority_queue_policy"][str(BULK)]}  # fmt: skip
    for level, policy in levels.items():
        expected = want.default if level == REALTIME else want.per_level[level]
        assert policy["timeout_action"] == "REJECT", level
        assert policy["allow_timeout_override"] is True, level
        assert int(policy["max_queue_size"]) == expected.max_queue_size, level
        assert int(policy["default_timeout_microseconds"]) == expected.timeout_us, level
    assert int(levels[BULK]["max_queue_size"]) > int(levels[REALTIME]["max_queue_size"])


@pytest.mark.server
@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_realtime_requests_go_ahead_of_a_bulk_flood(triton_server, reference_embed, protocol):
    url = triton_server.options.url(protocol)
    with leveled(triton_server):
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
    realtime_errors: list[str] = []
    with leveled(control_server) as (repo, config):
        small = copy.deepcopy(config)
        small["dynamic_batching"]["priority_queue_policy"][str(BULK)]["max_queue_size"] = 2
        repo.load(spec.ENCODER_MODEL, config=small)
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
    # A 1 µs queue timeout behind a flood: Triton rejects it, so the value reached the server
    # (a queue with levels applies a request's timeout; the plain queue would not).
    with leveled(triton_server), BulkFlood(url, "http", real_texts(16), clients=8) as bulk:
        deadline = time.monotonic() + DEADLINE_S
        while not bulk.served_ms and time.monotonic() < deadline:
            time.sleep(0.2)
        late = client_cli("--url", url, "--timeout-us", "1", "embed", "hello")
    assert late.returncode == 1, late.stdout
    assert "Request timeout expired" in late.stderr, late.stderr
