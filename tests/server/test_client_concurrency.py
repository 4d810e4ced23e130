"""On the real server: clients shared across threads, asyncio clients, sessions in
order when events are fired without waiting, deadlines, retries and error kinds."""

from __future__ import annotations

import asyncio
import random
import secrets
from concurrent.futures import ThreadPoolExecutor, wait

import numpy as np
import pytest

from tests.sentences import SENTENCES
from tests.server.test_ctr import assert_ranking_matches, random_session
from tests.server.test_ctr import reference as reference
from tritonrepo.server.launcher import free_port
from tritonrepo_client import (
    EmbeddingClient,
    RankingClient,
    RepositoryClient,
    SessionClient,
)
from tritonrepo_client.aio import AsyncEmbeddingClient, AsyncRankingClient, AsyncSessionClient
from tritonrepo_client.errors import (
    ClientError,
    DeadlineExceeded,
    RequestRejected,
    ServerUnreachable,
    WrongProtocol,
)
from tritonrepo_client.retry import RetryPolicy

pytestmark = pytest.mark.server
PROTOCOLS = ["http", "grpc"]
# For a whole test's work (a hang fails here instead of stalling CI); ctr_session serves about
# 50-100 events/s on 2 busy cores, and 200 sessions x 3 events are 600 of them per protocol.
DEADLINE_S = 300
TEXTS = list(SENTENCES[:48])


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.fixture(scope="module")
def expected_vectors(reference_embed) -> np.ndarray:
    return reference_embed(TEXTS)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_one_client_of_each_kind_shared_by_16_threads(
    triton_server, expected_vectors, reference, protocol
):
    url = triton_server.options.url(protocol)
    rng = np.random.default_rng(3)
    requests = [
        (rng.integers(1, 10_000, 20).tolist(), rng.integers(1, 10_000, 8).tolist())
        for _ in range(32)
    ]
    with (
        EmbeddingClient(url, protocol) as embedder,
        RankingClient(url, protocol) as ranker,
        SessionClient(url, protocol) as sessions,
        RepositoryClient(url, protocol, key=triton_server.options.repository_key) as repo,
        ThreadPoolExecutor(16) as pool,
    ):
        embeds = [pool.submit(embedder.embed, [t]) for t in TEXTS]
        ranks = [pool.submit(ranker.rank, h, c, len(c)) for h, c in requests]
        session_ids = [f"threads-{protocol}-{i}-{secrets.token_hex(3)}" for i in range(16)]
        streams = {cid: random_session(rng, 3) for cid in session_ids}

        def play(cid: str) -> list:
            session = sessions.session(cid)
            events = streams[cid]
            return [session.send(i, c, end=k == len(events) - 1) for k, (i, c) in enumerate(events)]

        played = {cid: pool.submit(play, cid) for cid in session_ids}
        indexes = [pool.submit(repo.index) for _ in range(16)]
        futures = [*embeds, *ranks, *played.values(), *indexes]
        _done, pending = wait(futures, timeout=DEADLINE_S)
        assert not pending, f"{len(pending)} calls still running after {DEADLINE_S} s"
    got = np.concatenate([f.result() for f in embeds])
    assert cosines(got, expected_vectors).min() >= 0.9999
    for (history, candidates), future in zip(requests, ranks, strict=True):
        assert_ranking_matches(
            future.result(), reference(history, candidates), candidates, len(candidates)
        )
    for cid, future in played.items():
        history: list[int] = []
        for (item, candidates), ranking in zip(streams[cid], future.result(), strict=True):
            history.append(item)
            assert_ranking_matches(
                ranking, reference(history, candidates), candidates, len(candidates)
            )
    assert all({r.name for r in f.result()} >= {"text_embedding"} for f in indexes)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_asyncio_clients_under_many_concurrent_calls(
    triton_server, expected_vectors, reference, protocol
):
    url = triton_server.options.url(protocol)
    rng = np.random.default_rng(4)
    requests = [
        (rng.integers(1, 10_000, 10).tolist(), rng.integers(1, 10_000, 5).tolist())
        for _ in range(64)
    ]

    async def main() -> tuple[list, list, np.ndarray]:
        async with (
            AsyncEmbeddingClient(url, protocol) as embedder,
            AsyncRankingClient(url, protocol) as ranker,
        ):
            vectors = await asyncio.gather(*(embedder.embed([t]) for t in TEXTS))
            ranks = await asyncio.gather(*(ranker.rank(h, c, len(c)) for h, c in requests))
            batch = await embedder.embed(TEXTS * 3)  # several requests of max_batch_size
            return vectors, ranks, batch

    vectors, ranks, batch = asyncio.run(asyncio.wait_for(main(), DEADLINE_S))
    assert cosines(np.concatenate(vectors), expected_vectors).min() >= 0.9999
    assert cosines(batch, np.concatenate([expected_vectors] * 3)).min() >= 0.9999
    for (history, candidates), ranking in zip(requests, ranks, strict=True):
        assert_ranking_matches(ranking, reference(history, candidates), candidates, len(candidates))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_200_async_sessions_fired_without_waiting_stay_in_order(triton_server, reference, protocol):
    """Every event of 200 sessions is sent at once (no await between them); each answer must
    equal ctr_ranking's on that session's full history so far (ctr_ranking itself is checked
    against PyTorch in test_ctr.py)."""
    url = triton_server.options.url(protocol)
    rng = np.random.default_rng(6)
    tag = secrets.token_hex(3)
    streams = {
        (f"aio-{tag}-{i}" if i % 2 else 7_000_000 + i + rng.integers(1, 10**9)): random_session(
            rng, 3
        )
        for i in range(200)
    }

    async def main() -> tuple[dict, dict]:
        async with (
            AsyncSessionClient(url, protocol) as client,
            AsyncRankingClient(url, protocol) as ranker,
        ):
            pending = {}
            for cid, events in streams.items():
                session = client.session(int(cid) if not isinstance(cid, str) else cid)
                pending[cid] = [
                    session.send(item, cands, end=k == len(events) - 1)
                    for k, (item, cands) in enumerate(events)
                ]
            answers = {cid: await asyncio.gather(*futures) for cid, futures in pending.items()}
            keys = [(cid, k) for cid, events in streams.items() for k in range(len(events))]
            limit = asyncio.Semaphore(16)  # the references need not queue for minutes

            async def reference_rank(cid: int | str, k: int):
                history = [item for item, _ in streams[cid][: k + 1]]
                candidates = streams[cid][k][1]
                async with limit:
                    return await ranker.rank(history, candidates, len(candidates))

            ranked = await asyncio.gather(*(reference_rank(cid, k) for cid, k in keys))
            full: dict = {cid: [None] * len(events) for cid, events in streams.items()}
            for (cid, k), ranking in zip(keys, ranked, strict=True):
                full[cid][k] = ranking
            return answers, full

    answers, full = asyncio.run(asyncio.wait_for(main(), DEADLINE_S))
    for cid, events in streams.items():
        for k, (_, candidates) in enumerate(events):
            got, want = answers[cid][k], full[cid][k]
            np.testing.assert_allclose(got.scores, want.scores, atol=1e-5, rtol=0)
            # equal scores may swap places; each id must carry ctr_ranking's score for it
            by_id = dict(zip(want.item_ids.tolist(), want.scores.tolist(), strict=True))
            assert sorted(got.item_ids.tolist()) == sorted(candidates)
            np.testing.assert_allclose(
                [by_id[i] for i in got.item_ids.tolist()], got.scores, atol=1e-5, rtol=0
            )


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_thread_sessions_submitted_without_waiting_stay_in_order(
    triton_server, reference, protocol
):
    rng = np.random.default_rng(8)
    with SessionClient(triton_server.options.url(protocol), protocol) as client:
        streams = {f"submit-{secrets.token_hex(4)}": random_session(rng, 5) for _ in range(40)}
        futures = {}
        for cid, events in streams.items():
            session = client.session(cid)
            futures[cid] = [
                session.submit(item, cands, end=k == len(events) - 1)
                for k, (item, cands) in enumerate(events)
            ]
        for cid, events in streams.items():
            history: list[int] = []
            for (item, candidates), future in zip(events, futures[cid], strict=True):
                history.append(item)
                ranking = future.result(timeout=DEADLINE_S)
                assert_ranking_matches(
                    ranking, reference(history, candidates), candidates, len(candidates)
                )


# --- deadlines, retries, error kinds -----------------------------------------------------------
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_deadline_too_short_ends_in_deadline_exceeded(triton_server, protocol):
    with EmbeddingClient(triton_server.options.url(protocol), protocol) as client:
        with pytest.raises(DeadlineExceeded) as info:
            client.embed(["a long text " * 200] * 64, timeout_s=0.001)
        assert info.value.kind == "timeout" and info.value.attempts == 1
        assert client.embed(["fine"]).shape == (1, 384)  # the client is still usable


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_refused_request_is_not_retried_and_says_invalid(triton_server, protocol):
    url = triton_server.options.url(protocol)
    with (
        RankingClient(url, protocol) as client,
        pytest.raises(RequestRejected, match="TOP_K") as info,
    ):
        client.rank([1, 2], [3, 4], top_k=0)
    assert info.value.kind == "invalid" and info.value.attempts == 1


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_no_server_is_retried_with_backoff_then_unreachable(protocol):
    url = f"127.0.0.1:{free_port()}"
    policy = RetryPolicy(attempts=3, initial_backoff_s=0.01, max_backoff_s=0.02)
    with (
        EmbeddingClient(url, protocol, timeout_s=5, retry=policy) as client,
        pytest.raises(ServerUnreachable) as info,
    ):
        client.embed(["x"])
    assert info.value.attempts == 3 and "after 3 tries" in str(info.value)
    with (
        SessionClient(url, protocol, timeout_s=5, retry=policy) as sessions,
        pytest.raises(ServerUnreachable) as info,
    ):
        sessions.session(42).send(1, [2, 3])
    assert info.value.attempts == 1, "session events must never be retried"

    async def aio() -> None:
        async with AsyncRankingClient(url, protocol, timeout_s=5, retry=policy) as client:
            await client.rank([1], [2])

    with pytest.raises(ServerUnreachable) as info:
        asyncio.run(aio())
    assert info.value.attempts == 3


def test_every_failure_is_a_client_error():
    for kind in (DeadlineExceeded, RequestRejected, ServerUnreachable):
        assert issubclass(kind, ClientError)


def test_backoff_delays_are_bounded_and_jittered():
    policy = RetryPolicy(attempts=6, initial_backoff_s=0.1, max_backoff_s=0.5)
    runs = [list(policy.delays(rng=random.Random(seed))) for seed in range(50)]
    bounds = [0.1, 0.2, 0.4, 0.5, 0.5]
    for delays in runs:
        assert len(delays) == 5
        assert all(0 <= d <= b for d, b in zip(delays, bounds, strict=True))
    assert len({tuple(d) for d in runs}) > 1, "delays must be jittered"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_asyncio_embed_refuses_a_bare_text_and_non_text_items(triton_server, protocol):
    """The asyncio client used to embed "hello" as 5 texts, one per character."""
    url = triton_server.options.url(protocol)

    async def main() -> np.ndarray:
        async with AsyncEmbeddingClient(url, protocol) as client:
            with pytest.raises(ValueError, match=r"got one str \('hello'\): pass \[text\]"):
                await client.embed("hello")
            with pytest.raises(ValueError, match=r"item 1 is int 2, not str or bytes"):
                await client.embed(["one", 2])
            return await client.embed(["hello"])

    assert asyncio.run(asyncio.wait_for(main(), DEADLINE_S)).shape == (1, 384)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_other_protocols_port_is_named_with_the_fix(triton_server, protocol):
    """An HTTP client at the gRPC port used to fail with HTTPParseError ('Expected HTTP/', 8)
    (aiohttp: "Bad status line"); a gRPC client at the HTTP port with an HTTP/2 parse error.
    Both now say which port it is and what to use instead, without retrying."""
    other = "grpc" if protocol == "http" else "http"
    wrong_url = triton_server.options.url(other)
    fix = f"--protocol {other}"
    with (
        EmbeddingClient(wrong_url, protocol, timeout_s=10) as client,
        pytest.raises(WrongProtocol, match=f"does not speak {protocol}: .*{fix}") as info,
    ):
        client.embed(["x"])
    assert info.value.attempts == 1 and info.value.kind == "protocol"
    assert {"http": "Triton's gRPC port", "grpc": "Triton's HTTP port"}[protocol] in str(info.value)

    async def aio() -> None:
        async with AsyncEmbeddingClient(wrong_url, protocol, timeout_s=10) as client:
            await client.embed(["x"])

    with pytest.raises(WrongProtocol, match=f"does not speak {protocol}: .*{fix}"):
        asyncio.run(asyncio.wait_for(aio(), DEADLINE_S))
