"""The thread-based and asyncio clients are one client: every public method of each sync/async
pair exists on both sides with the same parameters, and, run on the same server over HTTP and
gRPC, gives the same answers and the same error kinds and messages for the same bad inputs.
Embedding values are checked against sentence-transformers (``reference_embed``)."""

from __future__ import annotations

import asyncio
import inspect
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import pytest

from reference_data import photos
from tests.sentences import SENTENCES
from tritonrepo.server.launcher import free_port
from tritonrepo.text import spec
from tritonrepo_client import (
    AsyncClassificationClient,
    AsyncEmbeddingClient,
    AsyncRankingClient,
    AsyncSession,
    AsyncSessionClient,
    AsyncTritonConnection,
    Classification,
    ClassificationClient,
    EmbeddingClient,
    Ranking,
    RankingClient,
    RetryPolicy,
    Session,
    SessionClient,
    TritonConnection,
)
from tritonrepo_client.embedding import BadText

pytestmark = pytest.mark.server
PROTOCOLS = ["http", "grpc"]
PAIRS = [
    (EmbeddingClient, AsyncEmbeddingClient),
    (RankingClient, AsyncRankingClient),
    (SessionClient, AsyncSessionClient),
    (Session, AsyncSession),
    (ClassificationClient, AsyncClassificationClient),
    (TritonConnection, AsyncTritonConnection),
]
CONTEXT = {"__enter__": "__aenter__", "__exit__": "__aexit__"}
TEXTS = list(SENTENCES[:12])
DEADLINE_S = 300


# --- the same methods and signatures on both sides ---------------------------------------------
def public_api(cls: type) -> dict[str, Any]:
    """``{name: parameters}`` of the public methods (``None`` for a property), constants
    (UPPER_CASE class attributes) left out; ``__enter__``/``__exit__`` named as their async
    twins."""
    api: dict[str, Any] = {}
    for name, member in inspect.getmembers(cls):
        if name.startswith("_") and name not in CONTEXT.values() and name not in CONTEXT:
            continue
        if name.isupper():
            continue
        if isinstance(inspect.getattr_static(cls, name), property):
            api[CONTEXT.get(name, name)] = None
        elif callable(member):
            params = list(inspect.signature(member).parameters.values())[1:]  # not self
            api[CONTEXT.get(name, name)] = [(p.name, p.kind, p.default) for p in params]
    return api


@pytest.mark.parametrize(("sync_cls", "async_cls"), PAIRS, ids=lambda c: c.__name__)
def test_the_pairs_have_the_same_public_methods_and_signatures(sync_cls, async_cls):
    sync_api, async_api = public_api(sync_cls), public_api(async_cls)
    assert sorted(sync_api) == sorted(async_api), (
        f"only {sync_cls.__name__}: {sorted(set(sync_api) - set(async_api))}; only "
        f"{async_cls.__name__}: {sorted(set(async_api) - set(sync_api))}"
    )
    for name, params in sync_api.items():
        if params is None and async_api[name] == []:
            continue  # a sync property is an argument-less coroutine method (max_batch_size)
        assert params == async_api[name], f"{name}: {params} != {async_api[name]}"


def test_the_pair_check_sees_a_method_added_to_one_side():
    class Extra(EmbeddingClient):
        def embed_more(self) -> None:
            """One side only."""

    with pytest.raises(AssertionError, match="embed_more"):
        test_the_pairs_have_the_same_public_methods_and_signatures(Extra, AsyncEmbeddingClient)


# --- the same answers and errors on a real server -------------------------------------------
def outcome_of(fn: Callable[[], Any]) -> Any:
    try:
        return fn()
    except Exception as exc:
        return exc


async def async_outcome_of(fn: Callable[[], Awaitable[Any]]) -> Any:
    try:
        return await fn()
    except Exception as exc:
        return exc


async def collect(iterator: Any) -> list:
    return [item async for item in iterator]


def assert_same(sync: Any, aio: Any, where: str, tag: tuple[str, str] | None = None) -> None:
    """Equal answers (arrays within 1e-5; rankings by score, equal scores may swap ids) or
    errors of the same type, ``kind``, ``attempts``, message and (BadText) ``index``; ``tag``
    names the sync and async correlation IDs, replaced in messages."""
    if isinstance(sync, BaseException) or isinstance(aio, BaseException):
        assert type(sync) is type(aio), f"{where}: {sync!r} != {aio!r}"
        texts = [str(sync), str(aio)]
        if tag:
            texts = [texts[0].replace(tag[0], "<cid>"), texts[1].replace(tag[1], "<cid>")]
        assert texts[0] == texts[1], where
        for attribute in ("kind", "attempts", "index"):
            assert getattr(sync, attribute, None) == getattr(aio, attribute, None), where
    elif isinstance(sync, Ranking):
        np.testing.assert_allclose(sync.scores, aio.scores, atol=1e-5, err_msg=where)
        assert sorted(sync.item_ids.tolist()) == sorted(aio.item_ids.tolist()), where
    elif isinstance(sync, Classification):
        assert sync.labels == aio.labels, where
        np.testing.assert_allclose(sync.scores, aio.scores, atol=1e-5, err_msg=where)
    elif isinstance(sync, np.ndarray):
        np.testing.assert_allclose(sync, aio, atol=1e-5, err_msg=where)
    elif isinstance(sync, list | tuple) and not isinstance(sync, str):
        assert len(sync) == len(aio), where
        for i, (a, b) in enumerate(zip(sync, aio, strict=True)):
            assert_same(a, b, f"{where}[{i}]", tag)
    elif isinstance(sync, dict):
        assert sorted(sync) == sorted(aio), where
        for key in sync:
            assert_same(sync[key], aio[key], f"{where}[{key}]", tag)
    else:
        assert sync == aio, where


def assert_all_same(sync: dict[str, Any], aio: dict[str, Any], tag=None) -> None:
    assert list(sync) == list(aio)
    for where in sync:
        assert_same(sync[where], aio[where], where, tag)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_embedding_clients_agree_with_each_other_and_the_reference(
    triton_server, reference_embed, protocol
):
    url = triton_server.options.url(protocol)
    bad_stream = [*TEXTS[:7], b"\xff", *TEXTS[:3]]  # invalid UTF-8: the tokenizer's TEXT[i]
    heavy = ["a long text " * 200] * 64
    with EmbeddingClient(url, protocol) as client:
        sync = {
            "max_batch_size": client.max_batch_size,
            "embed": outcome_of(lambda: client.embed(TEXTS)),
            "embed version 1": outcome_of(lambda: client.embed(TEXTS[:2], model_version="1")),
            "embed bulk priority": outcome_of(lambda: client.embed(TEXTS[:2], priority=2)),
            "embed version 7": outcome_of(lambda: client.embed(["x"], model_version="7")),
            "embed bare text": outcome_of(lambda: client.embed("hello")),
            "embed non-text": outcome_of(lambda: client.embed(["one", 2])),
            "embed bad priority": outcome_of(lambda: client.embed(["x"], priority=-1)),
            "embed deadline": outcome_of(lambda: client.embed(heavy, timeout_s=0.001)),
            "embed_iter": outcome_of(lambda: list(client.embed_iter(TEXTS, batch_size=5))),
            "embed_iter bad": outcome_of(lambda: list(client.embed_iter(bad_stream, 4, 2))),
            "embed_iter size 0": outcome_of(lambda: list(client.embed_iter(TEXTS, 0, 0))),
            "close": client.close(),
        }

    async def run() -> dict[str, Any]:
        async with AsyncEmbeddingClient(url, protocol) as client:
            return {
                "max_batch_size": await client.max_batch_size(),
                "embed": await async_outcome_of(lambda: client.embed(TEXTS)),
                "embed version 1": await async_outcome_of(
                    lambda: client.embed(TEXTS[:2], model_version="1")
                ),
                "embed bulk priority": await async_outcome_of(
                    lambda: client.embed(TEXTS[:2], priority=2)
                ),
                "embed version 7": await async_outcome_of(
                    lambda: client.embed(["x"], model_version="7")
                ),
                "embed bare text": await async_outcome_of(lambda: client.embed("hello")),
                "embed non-text": await async_outcome_of(lambda: client.embed(["one", 2])),
                "embed bad priority": await async_outcome_of(
                    lambda: client.embed(["x"], priority=-1)
                ),
                "embed deadline": await async_outcome_of(
                    lambda: client.embed(heavy, timeout_s=0.001)
                ),
                "embed_iter": await async_outcome_of(
                    lambda: collect(client.embed_iter(TEXTS, batch_size=5))
                ),
                "embed_iter bad": await async_outcome_of(
                    lambda: collect(client.embed_iter(bad_stream, 4, 2))
                ),
                "embed_iter size 0": await async_outcome_of(
                    lambda: collect(client.embed_iter(TEXTS, 0, 0))
                ),
                "close": await client.close(),
            }

    aio = asyncio.run(asyncio.wait_for(run(), DEADLINE_S))
    assert_all_same(sync, aio)
    reference = reference_embed(TEXTS)
    cosines = np.sum(sync["embed"] * reference, axis=1)  # rows are unit length
    assert cosines.min() >= 0.9999, cosines
    np.testing.assert_allclose(np.concatenate(aio["embed_iter"]), reference, atol=2e-3)
    np.testing.assert_allclose(aio["embed version 1"], reference[:2], atol=2e-3)
    assert isinstance(sync["embed_iter bad"], BadText) and sync["embed_iter bad"].index == 7
    assert type(sync["embed version 7"]).__name__ == "VersionNotLoaded"
    assert "version 7 of model 'text_embedding' is not loaded" in str(sync["embed version 7"])
    assert "deadline of 0.001 s exceeded" in str(sync["embed deadline"])
    assert isinstance(sync["embed bare text"], ValueError)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_ranking_clients_agree(triton_server, protocol):
    url = triton_server.options.url(protocol)
    history, candidates = [12, 7, 981], [5, 66, 4000, 31, 2]
    with RankingClient(url, protocol) as client:
        sync = {
            "rank": outcome_of(lambda: client.rank(history, candidates)),
            "rank top 2": outcome_of(lambda: client.rank(history, candidates, 2, 30, 2)),
            "rank top 0": outcome_of(lambda: client.rank(history, candidates, top_k=0)),
            "rank no candidates": outcome_of(lambda: client.rank(history, [])),
            "rank floats": outcome_of(lambda: client.rank([1], [1.5])),
            "max_batch_size": client.max_batch_size,
            "close": client.close(),
        }

    async def run() -> dict[str, Any]:
        async with AsyncRankingClient(url, protocol) as client:
            return {
                "rank": await async_outcome_of(lambda: client.rank(history, candidates)),
                "rank top 2": await async_outcome_of(
                    lambda: client.rank(history, candidates, 2, 30, 2)
                ),
                "rank top 0": await async_outcome_of(
                    lambda: client.rank(history, candidates, top_k=0)
                ),
                "rank no candidates": await async_outcome_of(lambda: client.rank(history, [])),
                "rank floats": await async_outcome_of(lambda: client.rank([1], [1.5])),
                "max_batch_size": await client.max_batch_size(),
                "close": await client.close(),
            }

    aio = asyncio.run(asyncio.wait_for(run(), DEADLINE_S))
    assert_all_same(sync, aio)
    assert len(sync["rank top 2"].item_ids) == 2
    assert sync["rank top 0"].kind == "invalid" and "TOP_K" in str(sync["rank top 0"])


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_session_clients_agree(triton_server, protocol):
    url = triton_server.options.url(protocol)
    tags = (f"sync-{secrets.token_hex(4)}", f"aio-{secrets.token_hex(4)}")
    events = [{"item_id": 11, "candidates": [1, 2, 3]}, {"item_id": 12, "candidates": [3, 4]}]
    broken = [events[0], {"item_id": "x", "candidates": [1]}]
    with SessionClient(url, protocol) as client:
        tag = tags[0]
        session = client.session(tag + "-a")
        sync = {
            "send": outcome_of(lambda: session.send(21, [1, 2])),
            "send empty": outcome_of(lambda: session.send(22, [])),
            "submit": outcome_of(lambda: session.submit(23, [1, 2, 5]).result(DEADLINE_S)),
            "send end": outcome_of(lambda: session.send(24, [5, 6], end=True)),
            "send after end": outcome_of(lambda: session.send(25, [1])),
            "send bad item": outcome_of(lambda: client.session(tag + "-b").send("x", [1])),
            "session 0": outcome_of(lambda: client.session(0)),
            "replay": outcome_of(lambda: list(client.replay(tag + "-c", events))),
            "replay broken": outcome_of(lambda: list(client.replay(tag + "-d", broken))),
            "max_batch_size": client.max_batch_size,
            "close": client.close(),
        }

    async def run() -> dict[str, Any]:
        tag = tags[1]
        async with AsyncSessionClient(url, protocol) as client:
            session = client.session(tag + "-a")
            return {
                "send": await async_outcome_of(lambda: session.send(21, [1, 2])),
                "send empty": await async_outcome_of(lambda: session.send(22, [])),
                "submit": await async_outcome_of(lambda: session.submit(23, [1, 2, 5])),
                "send end": await async_outcome_of(lambda: session.send(24, [5, 6], end=True)),
                "send after end": await async_outcome_of(lambda: session.send(25, [1])),
                "send bad item": await async_outcome_of(
                    lambda: client.session(tag + "-b").send("x", [1])
                ),
                "session 0": outcome_of(lambda: client.session(0)),
                "replay": await async_outcome_of(
                    lambda: collect(client.replay(tag + "-c", events))
                ),
                "replay broken": await async_outcome_of(
                    lambda: collect(client.replay(tag + "-d", broken))
                ),
                "max_batch_size": await client.max_batch_size(),
                "close": await client.close(),
            }

    aio = asyncio.run(asyncio.wait_for(run(), DEADLINE_S))
    assert_all_same(sync, aio, tags)
    assert "CANDIDATES must hold 1 to 512" in str(sync["send empty"])
    assert isinstance(sync["send after end"], RuntimeError)
    assert isinstance(sync["session 0"], ValueError)
    assert isinstance(sync["replay broken"], ValueError) and "event 2" in str(sync["replay broken"])


@pytest.fixture(scope="module")
def image_files() -> list[bytes]:
    return [photos.photo_file(name) for name in list(photos.PHOTOS)[:3]]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_classification_clients_agree(triton_server, image_files, protocol):
    url = triton_server.options.url(protocol)
    mixed = [image_files[0], b"<html>not an image</html>", image_files[1]]
    with ClassificationClient(url, protocol) as client:
        sync = {
            "max_batch_size": client.max_batch_size,
            "classify": outcome_of(lambda: client.classify(image_files)),
            "classify top 2": outcome_of(lambda: client.classify(image_files, 2)),
            "classify class count": outcome_of(
                lambda: client.classify(image_files, 3, via_class_count=True)
            ),
            "classify version 9": outcome_of(lambda: client.classify(image_files, 1, "9")),
            "classify bad image": outcome_of(lambda: client.classify(mixed)),
            "classify bare bytes": outcome_of(lambda: client.classify(image_files[0])),
            "classify top 0": outcome_of(lambda: client.classify(image_files, 0)),
            "classify_each": outcome_of(lambda: client.classify_each(mixed, 2, 2)),
            "close": client.close(),
        }

    async def run() -> dict[str, Any]:
        async with AsyncClassificationClient(url, protocol) as client:
            return {
                "max_batch_size": await client.max_batch_size(),
                "classify": await async_outcome_of(lambda: client.classify(image_files)),
                "classify top 2": await async_outcome_of(lambda: client.classify(image_files, 2)),
                "classify class count": await async_outcome_of(
                    lambda: client.classify(image_files, 3, via_class_count=True)
                ),
                "classify version 9": await async_outcome_of(
                    lambda: client.classify(image_files, 1, "9")
                ),
                "classify bad image": await async_outcome_of(lambda: client.classify(mixed)),
                "classify bare bytes": await async_outcome_of(
                    lambda: client.classify(image_files[0])
                ),
                "classify top 0": await async_outcome_of(lambda: client.classify(image_files, 0)),
                "classify_each": await async_outcome_of(lambda: client.classify_each(mixed, 2, 2)),
                "close": await client.close(),
            }

    aio = asyncio.run(asyncio.wait_for(run(), DEADLINE_S))
    assert_all_same(sync, aio)
    assert [c.labels[:3] for c in sync["classify class count"]] == [
        c.labels[:3] for c in sync["classify"]
    ]
    assert type(sync["classify version 9"]).__name__ == "VersionNotLoaded"
    assert sync["classify bad image"].kind == "invalid"
    assert sync["classify_each"][1].kind == "invalid"


def unreachable_head(error: Any) -> Any:
    """An unreachable error without the transport's own words (they differ between
    geventhttpclient and aiohttp, grpc and grpc.aio): type, kind, attempts, message head."""
    if not isinstance(error, Exception):
        return error
    return type(error), error.kind, error.attempts, str(error).split(": ", 1)[0]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_connections_agree(triton_server, protocol):
    url = triton_server.options.url(protocol)
    ids = np.array([[101, 7592, 102]], dtype=np.int64)
    tokens = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    encoder, output = spec.ENCODER_MODEL, spec.ENCODER_OUTPUT
    floats = {"HISTORY": np.array([1], np.int64), "CANDIDATES": np.array([1.5], np.float32)}
    with TritonConnection(url, protocol) as conn:
        sync = {
            "server_live": outcome_of(conn.server_live),
            "server_ready": outcome_of(conn.server_ready),
            "model_ready": outcome_of(lambda: conn.model_ready("ctr_ranking")),
            "model_ready version 9": outcome_of(lambda: conn.model_ready("ctr_ranking", "9")),
            "model_versions": outcome_of(lambda: conn.model_versions(encoder)),
            "model_config": outcome_of(lambda: conn.model_config("ctr_ranking")["name"]),
            "model_config unknown": outcome_of(lambda: conn.model_config("no_such_model")),
            "call": outcome_of(lambda: conn.call("liveness", lambda: conn.client.is_server_live())),
            "infer": outcome_of(lambda: conn.infer(encoder, tokens, [output])),
            "infer version 2": outcome_of(lambda: conn.infer(encoder, tokens, [output], "2")),
            "infer floats": outcome_of(lambda: conn.infer("ctr_ranking", floats, ["ITEM_IDS"])),
            "client": conn.client is conn.client,
            "close": conn.close(),
        }

    async def run() -> dict[str, Any]:
        async with AsyncTritonConnection(url, protocol) as conn:
            return {
                "server_live": await async_outcome_of(conn.server_live),
                "server_ready": await async_outcome_of(conn.server_ready),
                "model_ready": await async_outcome_of(lambda: conn.model_ready("ctr_ranking")),
                "model_ready version 9": await async_outcome_of(
                    lambda: conn.model_ready("ctr_ranking", "9")
                ),
                "model_versions": await async_outcome_of(lambda: conn.model_versions(encoder)),
                "model_config": (await conn.model_config("ctr_ranking"))["name"],
                "model_config unknown": await async_outcome_of(
                    lambda: conn.model_config("no_such_model")
                ),
                "call": await async_outcome_of(
                    lambda: conn.call("liveness", lambda: conn.client.is_server_live())
                ),
                "infer": await async_outcome_of(lambda: conn.infer(encoder, tokens, [output])),
                "infer version 2": await async_outcome_of(
                    lambda: conn.infer(encoder, tokens, [output], "2")
                ),
                "infer floats": await async_outcome_of(
                    lambda: conn.infer("ctr_ranking", floats, ["ITEM_IDS"])
                ),
                "client": conn.client is conn.client,
                "close": await conn.close(),
            }

    aio = asyncio.run(asyncio.wait_for(run(), DEADLINE_S))
    assert_all_same(sync, aio)
    assert sync["server_live"] is True and sync["model_ready version 9"] is False
    assert sync["model_versions"] == ["1"]
    assert str(sync["infer version 2"]) == (
        "version 2 of model 'text_embedding_encoder' is not loaded (loaded versions: 1)"
    )
    assert sync["infer floats"].kind == "invalid" and "CANDIDATES" in str(sync["infer floats"])

    # No server: the same kind, tries and message head (the transports' words differ).
    nowhere = f"127.0.0.1:{free_port()}"
    policy = RetryPolicy(attempts=2, initial_backoff_s=0.01, max_backoff_s=0.01)
    with TritonConnection(nowhere, protocol, timeout_s=5, retry=policy) as conn:
        lost = outcome_of(lambda: conn.model_config("ctr_ranking"))

    async def run_lost() -> Any:
        async with AsyncTritonConnection(nowhere, protocol, timeout_s=5, retry=policy) as conn:
            return await async_outcome_of(lambda: conn.model_config("ctr_ranking"))

    aio_lost = asyncio.run(asyncio.wait_for(run_lost(), DEADLINE_S))
    assert unreachable_head(lost) == unreachable_head(aio_lost)
    assert lost.kind == "unreachable" and "after 2 tries" in str(lost)
