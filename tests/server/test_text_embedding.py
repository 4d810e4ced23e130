"""text_embedding end to end on the real server, against sentence-transformers."""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.sentences import LONG_PARAGRAPH, SENTENCES
from tritonrepo.text import spec
from tritonrepo_client import ClientError, EmbeddingClient

pytestmark = pytest.mark.server
PROTOCOLS = ["http", "grpc"]


def client_for(server, protocol: str) -> EmbeddingClient:
    return EmbeddingClient(server.options.url(protocol), protocol=protocol)


def raw_client(server, protocol: str):
    if protocol == "http":
        return httpclient, httpclient.InferenceServerClient(server.options.http_url)
    return grpcclient, grpcclient.InferenceServerClient(server.options.grpc_url)


def raw_infer(server, protocol: str, array: np.ndarray, datatype: str) -> np.ndarray:
    module, client = raw_client(server, protocol)
    try:
        tensor = module.InferInput("TEXT", list(array.shape), datatype)
        tensor.set_data_from_numpy(array)
        return client.infer(spec.ENSEMBLE, [tensor]).as_numpy("EMBEDDING")
    finally:
        client.close()


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def run_concurrently(jobs: list[Callable[[], object]]) -> list[object]:
    """Run jobs in threads released together by a barrier; exceptions are returned, not raised."""
    barrier = threading.Barrier(len(jobs))
    results: list[object] = [None] * len(jobs)

    def worker(i: int) -> None:
        barrier.wait()
        try:
            results[i] = jobs[i]()
        except Exception as exc:
            results[i] = exc

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return results


def batch_sizes(server, model: str) -> dict[int, int]:
    """{batch size: executions so far} from the server's statistics for ``model``."""
    client = httpclient.InferenceServerClient(server.options.http_url)
    try:
        stats = client.get_inference_statistics(model)["model_stats"]
    finally:
        client.close()
    return {
        int(b["batch_size"]): int(b["compute_infer"]["count"])
        for s in stats
        for b in s.get("batch_stats", [])
    }


def batched_executions(before: dict[int, int], after: dict[int, int]) -> dict[int, int]:
    """Executions with batch size > 1 that happened between two :func:`batch_sizes` calls."""
    return {
        size: after[size] - before.get(size, 0)
        for size in after
        if size > 1 and after[size] > before.get(size, 0)
    }


def test_test_set_covers_the_edge_cases(reference_model):
    lengths = [len(reference_model.tokenizer(t)["input_ids"]) for t in SENTENCES]
    assert "" in SENTENCES
    assert len(reference_model.tokenizer(LONG_PARAGRAPH)["input_ids"]) > spec.MAX_SEQ_LENGTH
    assert min(lengths) == 2 and max(lengths) > spec.MAX_SEQ_LENGTH
    assert any(not t.isascii() for t in SENTENCES)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_matches_sentence_transformers(triton_server, reference_embed, protocol):
    with client_for(triton_server, protocol) as client:
        got = client.embed(SENTENCES)
    expected = reference_embed(SENTENCES)
    assert got.shape == (len(SENTENCES), spec.HIDDEN_SIZE)
    assert got.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    cos = cosines(got, expected)
    worst = int(np.argmin(cos))
    assert cos.min() >= 0.9999, f"cosine {cos.min():.6f} for {SENTENCES[worst]!r}"


def test_more_texts_than_max_batch_size_are_split(triton_server, reference_embed):
    texts = [f"sentence number {i}" for i in range(spec.MAX_BATCH_SIZE + 5)]
    with client_for(triton_server, "http") as client:
        got = client.embed(texts)
    assert got.shape == (len(texts), spec.HIDDEN_SIZE)
    assert cosines(got, reference_embed(texts)).min() >= 0.9999


def test_concurrent_requests_batch_and_match_sequential(triton_server):
    texts = SENTENCES[:32]
    with client_for(triton_server, "grpc") as client:
        sequential = np.stack([client.embed([t])[0] for t in texts])

    before = batch_sizes(triton_server, spec.ENCODER_MODEL)
    clients = [client_for(triton_server, "http" if i % 2 else "grpc") for i in range(len(texts))]
    try:
        jobs = [lambda c=c, t=t: c.embed([t])[0] for c, t in zip(clients, texts, strict=True)]
        concurrent = run_concurrently(jobs)
    finally:
        for c in clients:
            c.close()
    after = batch_sizes(triton_server, spec.ENCODER_MODEL)

    errors = [r for r in concurrent if isinstance(r, Exception)]
    assert not errors, errors[:3]
    np.testing.assert_allclose(np.stack(concurrent), sequential, atol=1e-5)
    batched = batched_executions(before, after)
    assert batched, f"encoder ran no batch larger than 1: before {before}, after {after}"


def test_ragged_batch_in_one_request_matches_each_alone(triton_server):
    texts = ["Hi", LONG_PARAGRAPH, "", "A medium length sentence about dynamic batching."]
    with client_for(triton_server, "http") as client:
        together = client.embed(texts)
        alone = np.stack([client.embed([t])[0] for t in texts])
    np.testing.assert_allclose(together, alone, atol=1e-5)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_wrong_datatype_is_rejected(triton_server, protocol):
    with pytest.raises(InferenceServerException, match=r"data-type is 'INT32'.*expects 'BYTES'"):
        raw_infer(triton_server, protocol, np.zeros((2, 1), dtype=np.int32), "INT32")


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_empty_batch_is_rejected(triton_server, protocol):
    with pytest.raises(InferenceServerException, match="TEXT"):
        raw_infer(triton_server, protocol, np.zeros((0, 1), dtype=object), "BYTES")
    with client_for(triton_server, protocol) as client, pytest.raises(ValueError, match="at least"):
        client.embed([])


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_non_utf8_is_rejected_with_its_index(triton_server, protocol):
    bad = np.array([[b"fine"], [b"caf\xe9"]], dtype=object)  # Latin-1, not UTF-8
    with pytest.raises(
        InferenceServerException, match=r"TEXT\[1\] is not valid UTF-8 \(byte 0xe9 at offset 3\)"
    ):
        raw_infer(triton_server, protocol, bad, "BYTES")


def test_bad_request_does_not_harm_its_batch(triton_server, reference_embed):
    """Bad and good requests arrive together; only the bad ones fail."""
    texts = SENTENCES[:24]
    before = batch_sizes(triton_server, spec.TOKENIZE_MODEL)
    clients = [client_for(triton_server, "grpc") for _ in texts]
    bad_every = 4
    try:
        jobs = [
            (lambda c=c: c.embed([b"\xff\xfe broken"]))
            if i % bad_every == 0
            else (lambda c=c, t=t: c.embed([t])[0])
            for i, (c, t) in enumerate(zip(clients, texts, strict=True))
        ]
        results = run_concurrently(jobs)
    finally:
        for c in clients:
            c.close()
    after = batch_sizes(triton_server, spec.TOKENIZE_MODEL)

    expected = reference_embed(texts)
    for i, result in enumerate(results):
        if i % bad_every == 0:
            assert isinstance(result, ClientError), result
            assert "not valid UTF-8" in str(result)
        else:
            assert isinstance(result, np.ndarray), result
            assert cosines(result[None], expected[i][None])[0] >= 0.9999
    assert batched_executions(before, after), "tokenizer never batched the concurrent requests"


def test_server_healthy_after_bad_inputs(triton_server, reference_embed):
    for protocol in PROTOCOLS:
        for array, datatype in [
            (np.zeros((1, 1), dtype=np.float32), "FP32"),
            (np.zeros((0, 1), dtype=object), "BYTES"),
            (np.array([[b"\x80"]], dtype=object), "BYTES"),
        ]:
            with pytest.raises(InferenceServerException):
                raw_infer(triton_server, protocol, array, datatype)
    _, client = raw_client(triton_server, "http")
    try:
        assert client.is_server_live() and client.is_server_ready()
        for model in (spec.ENSEMBLE, spec.TOKENIZE_MODEL, spec.ENCODER_MODEL, spec.NORMALIZE_MODEL):
            assert client.is_model_ready(model), model
    finally:
        client.close()
    texts = ["Still serving after bad input.", "Another sentence."]
    with client_for(triton_server, "grpc") as embed_client:
        assert cosines(embed_client.embed(texts), reference_embed(texts)).min() >= 0.9999


@pytest.mark.parametrize(
    ("texts", "message"),
    [
        ("hello", r"got one str \('hello'\): pass \[text\] to embed it as one text"),
        (b"hello", r"got one bytes \(b'hello'\): pass \[text\]"),
        ([1, 2], r"item 0 is int 1, not str or bytes; pass str\(value\)"),
        (["ok", None], r"item 1 is NoneType None, not str or bytes"),
        (np.zeros((2, 3)), r"1-D list of texts, got an array of shape \(2, 3\)"),
        (np.zeros(2), r"item 0 is float64 0.0, not str or bytes"),
        ([], r"needs at least one text"),
    ],
    ids=["str", "bytes", "ints", "none", "2d-array", "float-array", "empty"],
)
def test_anything_but_a_list_of_texts_is_refused_with_the_fix(triton_server, texts, message):
    """A bare str used to be embedded character by character (5 rows for "hello"), and
    numbers or arrays as their printed form; now ValueError says what to pass instead."""
    with client_for(triton_server, "http") as client:
        with pytest.raises(ValueError, match=message):
            client.embed(texts)
        one = client.embed(["hello"])
        assert one.shape == (1, spec.HIDDEN_SIZE)
        assert np.allclose(client.embed(np.array(["hello"])), one, atol=1e-6)  # numpy strings


def test_embed_iter_refuses_one_text_and_names_a_non_text_item_by_its_index(triton_server):
    with client_for(triton_server, "grpc") as client:
        with pytest.raises(ValueError, match=r"embed_iter\(\) takes a list of texts, got one str"):
            list(client.embed_iter("hello"))
        stream = iter([*(f"text {i}" for i in range(25)), 7, "after"])
        with pytest.raises(ValueError, match=r"item 25 is int 7, not str or bytes"):
            list(client.embed_iter(stream, batch_size=10))
