"""Request-size limits on the real server: every bound gets its own clear per-request error and
the server keeps serving.

Triton 2.51 has no request-size option (gRPC accepts messages up to 2 GB; HTTP's
``--http-max-input-size`` arrived later), so the steps enforce the limits: ``max_text_bytes`` in
``text_embedding_tokenize``, the HISTORY / CANDIDATES / TOP_K bounds in ``ctr_preprocess`` and
``ctr_session``, the per-image and per-request pixel budgets in ``image_preprocess``.
"""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from reference_data import photos
from tritonrepo.ctr import spec as ctr_spec
from tritonrepo.image import spec as image_spec
from tritonrepo.server.launcher import TritonServer
from tritonrepo.text import spec as text_spec
from tritonrepo_client import Classification, ClassificationClient, RequestRejected

pytestmark = pytest.mark.server
PROTOCOLS = ["http", "grpc"]
LIMIT = text_spec.MAX_TEXT_BYTES
GOOD_TEXTS = [b"Still serving after a huge request.", b"Another sentence."]
OUTPUTS = {
    text_spec.ENSEMBLE: ["EMBEDDING"],
    ctr_spec.RANKING_ENSEMBLE: ["ITEM_IDS", "SCORES"],
    ctr_spec.SESSION_MODEL: ["ITEM_IDS", "SCORES"],
}


def client(server: TritonServer, protocol: str) -> tuple[Any, Any]:
    if protocol == "http":
        return httpclient, httpclient.InferenceServerClient(
            server.options.http_url, connection_timeout=300, network_timeout=300
        )
    return grpcclient, grpcclient.InferenceServerClient(server.options.grpc_url)


def infer(
    server: TritonServer, protocol: str, model: str, inputs: dict[str, np.ndarray], **kwargs: Any
) -> dict[str, np.ndarray]:
    """One inference; BYTES for object arrays. Raises InferenceServerException."""
    module, triton = client(server, protocol)
    try:
        tensors = []
        for name, array in inputs.items():
            datatype = "BYTES" if array.dtype == object else {
                np.dtype(np.int64): "INT64", np.dtype(np.int32): "INT32"
            }[array.dtype]  # fmt: skip
            tensor = module.InferInput(name, list(array.shape), datatype)
            tensor.set_data_from_numpy(array)
            tensors.append(tensor)
        result = triton.infer(model, tensors, **kwargs)
        return {name: result.as_numpy(name) for name in OUTPUTS[model]}
    finally:
        triton.close()


def embed(server: TritonServer, protocol: str, texts: list[bytes]) -> np.ndarray:
    array = np.array([[t] for t in texts], dtype=object)
    return infer(server, protocol, text_spec.ENSEMBLE, {"TEXT": array})["EMBEDDING"]


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def stub_pids(server: TritonServer) -> dict[str, int]:
    return {stub.instance: stub.pid for stub in server.stub_processes()}


def test_100_mb_grpc_request_gets_a_clear_error_and_the_server_keeps_serving(
    triton_server, reference_embed
):
    """The measured attack: 64 texts of 1.6 MB (100 MB) in one gRPC request. It used to hold
    the tokenizer for minutes; now it fails on its own with the limit named."""
    before = embed(triton_server, "grpc", GOOD_TEXTS)
    stubs = stub_pids(triton_server)
    huge = np.array([[b"word " * 320_000]] * text_spec.MAX_BATCH_SIZE, dtype=object)
    assert sum(len(t) for t in huge.reshape(-1)) == 102_400_000
    with pytest.raises(InferenceServerException) as raised:
        embed(triton_server, "grpc", list(huge.reshape(-1)))
    message = raised.value.message()
    assert "text_embedding_tokenize: TEXT[0] is 1600000 bytes, over the limit of 65536 bytes" in (
        message
    ), message
    assert "max_text_bytes" in message
    assert str(raised.value.status()) == "StatusCode.INVALID_ARGUMENT"

    _, triton = client(triton_server, "http")
    try:
        assert triton.is_server_ready()
        for model in (text_spec.ENSEMBLE, text_spec.TOKENIZE_MODEL, text_spec.ENCODER_MODEL):
            assert triton.is_model_ready(model), model
    finally:
        triton.close()
    assert stub_pids(triton_server) == stubs, "a stub died or was restarted"
    after = embed(triton_server, "grpc", GOOD_TEXTS)
    np.testing.assert_allclose(after, before, atol=1e-6, rtol=0)
    expected = reference_embed([t.decode() for t in GOOD_TEXTS])
    assert cosines(after, expected).min() >= 0.9999


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_text_size_limit_is_exact_and_names_the_item(triton_server, protocol):
    at_limit = ("日本語 " * LIMIT).encode()[:LIMIT]  # cut inside a character: fix the end
    at_limit = at_limit.decode("utf-8", "ignore").encode().ljust(LIMIT, b"a")
    assert len(at_limit) == LIMIT
    got = embed(triton_server, protocol, [b"short", at_limit])
    assert got.shape == (2, text_spec.HIDDEN_SIZE)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)

    with pytest.raises(InferenceServerException) as raised:
        embed(triton_server, protocol, [b"short", b"fine", at_limit + b"a"])
    assert f"TEXT[2] is {LIMIT + 1} bytes, over the limit of {LIMIT} bytes per text" in (
        raised.value.message()
    ), raised.value.message()
    assert str(raised.value.status()) in ("400", "StatusCode.INVALID_ARGUMENT")


def rank(server, protocol, history, candidates, top_k=None) -> dict[str, np.ndarray]:
    inputs = {
        "HISTORY": np.asarray(history, np.int64),
        "CANDIDATES": np.asarray(candidates, np.int64),
    }
    if top_k is not None:
        inputs["TOP_K"] = np.array([top_k], np.int32)
    return infer(server, protocol, ctr_spec.RANKING_ENSEMBLE, inputs)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_ctr_ranking_bounds(triton_server, protocol):
    """HISTORY 0..4096 ids (only the last 63 count), CANDIDATES 1..512, TOP_K >= 1 (cut to n)."""
    rng = np.random.default_rng(0)
    history = rng.integers(1, 10_000, size=ctr_spec.MAX_HISTORY)
    candidates = rng.integers(1, 10_000, size=8)
    full = rank(triton_server, protocol, history, candidates, 8)
    last_63 = rank(triton_server, protocol, history[-ctr_spec.HISTORY_LENGTH :], candidates, 8)
    np.testing.assert_allclose(full["SCORES"], last_63["SCORES"], atol=1e-6, rtol=0)

    int32_max = int(np.iinfo(np.int32).max)
    cut = rank(triton_server, protocol, [1], candidates, int32_max)
    assert cut["ITEM_IDS"].shape == (8,)
    assert len(rank(triton_server, protocol, [1], candidates)["ITEM_IDS"]) == 8  # default 10 > n

    one_too_many = np.append(history, 5)
    million = np.ones(1_000_000, np.int64)  # 8 MB
    for args, message in [
        ((one_too_many, candidates), "HISTORY must hold at most 4096 item ids, got 4097"),
        ((million, candidates), "HISTORY must hold at most 4096 item ids, got 1000000"),
        (([1], np.arange(1, 514)), "CANDIDATES must hold 1 to 512 item ids, got 513"),
        (([1], []), "CANDIDATES must hold 1 to 512 item ids, got 0"),
        (([1], candidates, 0), "TOP_K must be > 0, got 0"),
        (([1], candidates, -(2**31)), "TOP_K must be > 0, got -2147483648"),
    ]:
        with pytest.raises(InferenceServerException) as raised:
            rank(triton_server, protocol, *args)
        assert f"ctr_preprocess: {message}" in raised.value.message(), raised.value.message()
        assert str(raised.value.status()) in ("400", "StatusCode.INVALID_ARGUMENT")
    again = rank(triton_server, protocol, history, candidates, 8)
    np.testing.assert_allclose(again["SCORES"], full["SCORES"], atol=1e-6, rtol=0)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_ctr_session_candidate_bound_changes_no_state(triton_server, protocol):
    cid = f"limits-{protocol}"
    candidates = np.array([3, 4, 5], np.int64)

    def send(item: int, cands: np.ndarray, **flags: bool) -> dict[str, np.ndarray]:
        inputs = {"ITEM_ID": np.array([item], np.int64), "CANDIDATES": cands}
        return infer(
            triton_server, protocol, ctr_spec.SESSION_MODEL, inputs, sequence_id=cid, **flags
        )

    send(11, candidates, sequence_start=True)
    with pytest.raises(InferenceServerException, match="CANDIDATES must hold 1 to 512 item ids"):
        send(12, np.arange(1, 514))
    last = send(13, candidates, sequence_end=True)
    expected = rank(triton_server, protocol, [11, 13], candidates, 3)
    np.testing.assert_allclose(last["SCORES"], expected["SCORES"], atol=1e-5, rtol=0)


def single_colour_png(side: int) -> bytes:
    """A ``side`` x ``side`` PNG of one colour: 132 KB at 6324 (40.0 MP), as in the attack."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (side, side), (200, 30, 30)).save(buffer, "PNG")
    return buffer.getvalue()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_images_over_the_request_pixel_budget_are_refused_and_a_photo_is_served(
    triton_server, protocol
):
    """The measured attack: 32 single-colour 6324 x 6324 PNGs (4.2 MB, each under the 40 MP
    per-image limit) in one request held an image_preprocess stub for 24 s. Now the request is
    refused from the headers with the budget named, while a photo sent at the same time and a
    request of three such images (within the budget) are served."""
    bomb = single_colour_png(6324)
    cat = photos.photo_file("chelsea")
    url = triton_server.options.url(protocol)
    with ClassificationClient(url, protocol) as client:
        expected = client.classify([cat])[0]
        with ThreadPoolExecutor(2) as pool:
            attack = pool.submit(client.classify, [bomb] * image_spec.MAX_BATCH_SIZE)
            photo = pool.submit(client.classify, [cat])
            served = photo.result()[0]
            with pytest.raises(RequestRejected) as refused:
                attack.result()
        assert isinstance(served, Classification) and served.labels == expected.labels
        message = str(refused.value)
        assert "image_preprocess: IMAGE[3] puts the request over its decoding budget" in message
        assert f"its 32 images need {32 * 6324**2:,} pixels decoded" in message, message
        assert "over the limit of 120,000,000 (120 MP) per request" in message, message
        assert "max_request_pixels" in message, message
        within = client.classify([bomb] * 3)  # 119,978,928 pixels: decoded and classified
        assert len(within) == 3 and all(isinstance(r, Classification) for r in within)
        assert within[0].labels == within[2].labels and len(within[0].labels) == 5
        assert client.classify([cat])[0].labels == expected.labels
