"""ctr_ranking and ctr_session against a real server, over HTTP and gRPC.

Reference scores come from the trained PyTorch network (``builders.onnx_export.ctr_network``)
applied to rows built here from the issue's rules, not from the code under test.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from builders.onnx_export import ctr_network
from builders.onnx_export.ctr import WEIGHTS
from tests.conftest import client_cli
from tritonrepo_client import ClientError, RankingClient, SessionClient

PROTOCOLS = ["http", "grpc"]
TOLERANCE = 1e-5  # served CTR vs PyTorch
CONTROL_SERVER_MODELS = ("ctr_session",)  # the idle-session test (it calls ctr_model)


def reference_rows(history: list[int], candidates: list[int]) -> np.ndarray:
    """The CTR id rules, written out: ids outside 1..9999 -> 0, last 63 history items,
    left-padded with 0, candidate last."""

    def vocab(i: int) -> int:
        return i if 1 <= i <= 9999 else 0

    window = [vocab(i) for i in history][-63:] if history else []
    window = [0] * (63 - len(window)) + window
    return np.array([[*window, vocab(c)] for c in candidates], dtype=np.int64)


@pytest.fixture(scope="module")
def reference():
    """(history, candidates) -> FP32 [n] CTR from the PyTorch network."""
    model = ctr_network.load(WEIGHTS)

    def score(history: list[int], candidates: list[int]) -> np.ndarray:
        return ctr_network.predict(model, reference_rows(history, candidates))

    return score


def expected_ranking(scores: np.ndarray, candidates: list[int], k: int):
    order = np.argsort(-scores, kind="stable")[:k]
    return np.array(candidates)[order], scores[order]


def random_request(rng: np.random.Generator) -> tuple[list[int], list[int]]:
    history = rng.integers(-5, 10_010, size=int(rng.integers(0, 120))).tolist()
    candidates = rng.integers(-5, 10_010, size=int(rng.integers(1, 80))).tolist()
    return history, candidates


def assert_ranking_matches(result, reference_scores, candidates, k):
    _ids, scores = expected_ranking(reference_scores, candidates, k)
    assert result.scores.shape == (min(k, len(candidates)),)
    np.testing.assert_allclose(result.scores, scores, atol=TOLERANCE, rtol=0)
    # Equal scores may swap places within the tolerance; each returned id must carry its score.
    by_id = dict(zip(candidates, reference_scores, strict=True))
    np.testing.assert_allclose(
        [by_id[int(i)] for i in result.item_ids], result.scores, atol=TOLERANCE, rtol=0
    )
    assert (np.diff(result.scores) <= 0).all()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_ranking_matches_pytorch(triton_server, reference, protocol):
    rng = np.random.default_rng(3)
    cases = [random_request(rng) for _ in range(8)]
    cases += [
        ([], [7]),  # empty history, one candidate
        (list(range(1, 200)), list(range(9_800, 10_312))),  # long history, 512 candidates
        ([0, -1, 10_000, 2**40], [0, 5, 10_000, -7]),  # out-of-vocabulary everywhere
    ]
    with RankingClient(triton_server.options.url(protocol), protocol) as client:
        for history, candidates in cases:
            for k in (None, 1, 3, 600):
                result = client.rank(history, candidates, k)
                k_eff = 10 if k is None else k
                assert_ranking_matches(result, reference(history, candidates), candidates, k_eff)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_bad_requests_get_their_own_error(triton_server, reference, protocol):
    url = triton_server.options.url(protocol)
    bad = [
        (([1, 2], []), "CANDIDATES must hold 1 to 512 item ids, got 0"),
        (([1, 2], list(range(1, 514))), "got 513"),
        (([1, 2], [3, 4], 0), "TOP_K must be > 0, got 0"),
        (([1, 2], [3, 4], -2), "TOP_K must be > 0, got -2"),
    ]
    good = [random_request(np.random.default_rng(seed)) for seed in range(12)]

    def call(args):
        with RankingClient(url, protocol) as client:
            try:
                return client.rank(*args)
            except ClientError as exc:
                return exc

    jobs = [args for args, _ in bad] + [(h, c, 5) for h, c in good]
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(call, jobs))
    for (_, message), result in zip(bad, results[: len(bad)], strict=True):
        assert isinstance(result, ClientError) and message in str(result), result
    for (history, candidates, _k), result in zip(
        jobs[len(bad) :], results[len(bad) :], strict=True
    ):
        assert_ranking_matches(result, reference(history, candidates), candidates, 5)

    # Wrong data type: Triton refuses it before any model runs.
    with RankingClient(url, protocol) as client:
        with pytest.raises(ClientError, match="CANDIDATES"):
            client.connection.infer(
                "ctr_ranking",
                {"HISTORY": np.array([1], np.int64), "CANDIDATES": np.array([1.5], np.float32)},
                ["ITEM_IDS"],
            )
        with pytest.raises(ValueError, match="integer"):
            client.rank([1], [1.5])
        assert client.connection.model_ready("ctr_ranking")


def stream_session(client: SessionClient, cid, events):
    session = client.session(cid)
    return [
        session.send(item, candidates, end=i == len(events) - 1)
        for i, (item, candidates) in enumerate(events)
    ]


def random_session(rng: np.random.Generator, length: int) -> list[tuple[int, list[int]]]:
    return [
        (
            int(rng.integers(-3, 10_005)),
            rng.integers(1, 10_000, size=int(rng.integers(1, 40))).tolist(),
        )
        for _ in range(length)
    ]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_session_streaming_equals_full_history_ranking(triton_server, reference, protocol):
    """Property: for random sessions (lengths across the 63-item window, OOV items), event k's
    ranking equals ctr_ranking's for the first k items, and both match PyTorch."""
    url = triton_server.options.url(protocol)
    rng = np.random.default_rng(11)
    with SessionClient(url, protocol) as sessions, RankingClient(url, protocol) as ranking:
        for n, length in enumerate((1, 5, 70)):
            events = random_session(rng, length)
            cid = f"prop-{protocol}-{n}" if n % 2 else 1_000 + n
            streamed = stream_session(sessions, cid, events)
            history: list[int] = []
            for (item, candidates), result in zip(events, streamed, strict=True):
                history.append(item)
                full = ranking.rank(history, candidates, len(candidates))
                np.testing.assert_allclose(result.scores, full.scores, atol=TOLERANCE, rtol=0)
                assert_ranking_matches(
                    result, reference(history, candidates), candidates, len(candidates)
                )


def test_100_interleaved_concurrent_sessions_never_mix_state(triton_server, reference):
    """100 sessions (half numeric, half string IDs, both protocols) advance in lockstep from 8
    threads, so every server batch mixes sessions; each answer must match its own history."""
    rng = np.random.default_rng(5)
    sessions = {(f"user-{i}" if i % 2 else 50_000 + i): random_session(rng, 4) for i in range(100)}
    local = threading.local()

    def client_for(cid):
        protocol = PROTOCOLS[hash(str(cid)) % 2]
        key = f"c_{protocol}"
        if not hasattr(local, key):
            setattr(local, key, SessionClient(triton_server.options.url(protocol), protocol))
        return getattr(local, key)

    handles = {}
    failures = []

    def step(cid, k):
        item, candidates = sessions[cid][k]
        if k == 0:
            handles[cid] = client_for(cid).session(cid)
        # a new client per thread, the session object only carries the flags
        handles[cid].connection = client_for(cid).connection
        result = handles[cid].send(item, candidates, end=k == 3)
        history = [e[0] for e in sessions[cid][: k + 1]]
        try:
            assert_ranking_matches(
                result, reference(history, candidates), candidates, len(candidates)
            )
        except AssertionError as exc:
            failures.append((cid, k, str(exc)[:200]))

    with ThreadPoolExecutor(8) as pool:
        for k in range(4):
            order = list(sessions)
            rng.shuffle(order)
            list(pool.map(lambda cid, k=k: step(cid, k), order))
    assert failures == []


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_end_frees_the_session(triton_server, reference, protocol):
    url = triton_server.options.url(protocol)
    with SessionClient(url, protocol) as client:
        stream_session(client, "ended", [(11, [1, 2]), (12, [1, 2])])
        # After END the sequence is gone: continuing it is refused, not served fresh state.
        with pytest.raises(ClientError, match="START"):
            client.connection.infer(
                "ctr_session",
                {"ITEM_ID": np.array([13]), "CANDIDATES": np.array([1, 2])},
                ["SCORES"],
                sequence_id="ended",
            )
        # Starting the same ID again begins from an empty history.
        (result,) = stream_session(client, "ended", [(13, [1, 2, 3])])
        assert_ranking_matches(result, reference([13], [1, 2, 3]), [1, 2, 3], 3)


def test_session_bad_event_changes_no_state(triton_server, reference):
    with SessionClient(triton_server.options.url("http")) as client:
        session = client.session(424242)
        session.send(21, [1, 2])
        with pytest.raises(ClientError, match="CANDIDATES must hold 1 to 512"):
            session.send(22, [])
        result = session.send(23, [1, 2], end=True)
    assert_ranking_matches(result, reference([21, 23], [1, 2]), [1, 2], 2)


def test_cli_rank_and_session(triton_server, reference, tmp_path):
    url = triton_server.options.url("grpc")
    out = client_cli(
        "--protocol", "grpc", "--url", url, "rank",
        "--history", "5", "6", "--candidates", "7", "8", "9", "--top-k", "2",
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    ranked = json.loads(out.stdout)
    scores = reference([5, 6], [7, 8, 9])
    _ids, top = expected_ranking(scores, [7, 8, 9], 2)
    # PyTorch's top 2; candidates whose scores agree within the tolerance may swap places.
    by_id = dict(zip([7, 8, 9], scores, strict=True))
    assert len(set(ranked["item_ids"])) == 2, ranked
    np.testing.assert_allclose([by_id[i] for i in ranked["item_ids"]], top, atol=TOLERANCE, rtol=0)

    events = '{"item_id": 5, "candidates": [7, 8]}\n# comment\n{"item_id": 6, "candidates": [9]}\n'
    out = client_cli("--url", triton_server.options.url("http"), "session",
                     "--correlation-id", "cli-user", stdin=events)  # fmt: skip
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert [line["item_id"] for line in lines] == [5, 6]
    np.testing.assert_allclose(lines[1]["scores"], reference([5, 6], [9]), atol=1e-5)

    bad = client_cli("--url", triton_server.options.url("http"), "rank", "--candidates", "1",
                     "--top-k", "0")  # fmt: skip
    assert bad.returncode == 1 and "TOP_K must be > 0" in bad.stderr


def test_idle_session_is_evicted_with_a_clear_error(control_server):
    """With a 1 s idle timeout (load-API config override), a session idle for 3 s is gone:
    its next request is refused, not served from a fresh history."""
    from tritonrepo_client import RepositoryClient

    with RepositoryClient(
        control_server.options.url("http"), key=control_server.options.repository_key
    ) as repo:  # closed: an open keep-alive connection holds up the server's stop
        config = repo.config("ctr_session")
        config["sequence_batching"]["max_sequence_idle_microseconds"] = 1_000_000
        repo.load("ctr_session", config=config)
        try:
            with SessionClient(control_server.options.url("http")) as client:
                session = client.session("sleepy")
                session.send(1, [1, 2])
                time.sleep(3)
                with pytest.raises(ClientError, match="START"):
                    session.send(2, [1, 2])
        finally:
            repo.unload("ctr_session")
            repo.load("ctr_session")
