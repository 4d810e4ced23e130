"""OpenAI's ``POST /v1/embeddings`` on the HTTP port, through the HTTP guard, driven by OpenAI's
own Python client (``openai``) against a real server with ``text_embedding``.

References: the KServe v2 endpoint's answers for the same texts (the embeddings must be the same
floats), sentence-transformers' tokenizer for the token counts (``usage``), and the ensemble's
own statistics for how many KServe requests one OpenAI request became.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request

import numpy as np
import openai
import pytest

from reference_data.text_corpus import real_texts
from tests.conftest import require_artifacts, server_options
from tests.sentences import LONG_PARAGRAPH, SENTENCES
from tests.server.test_pipeline_client import requests_served
from tritonrepo.server.launcher import TritonServer
from tritonrepo.text import spec
from tritonrepo_client import PipelineClient

pytestmark = pytest.mark.server
MODEL = spec.ENSEMBLE


@pytest.fixture(scope="module")
def server():
    require_artifacts()
    options = server_options("openai-embeddings", models=(MODEL,), http_guard=True)
    with TritonServer(options) as server:
        yield server


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(
        base_url=f"http://{server.options.http_url}/v1", api_key="unused", max_retries=0
    ) as client:
        yield client


def kserve(server, texts: list[str]) -> dict[str, np.ndarray]:
    """EMBEDDING and TOKENS of ``texts`` from the KServe v2 endpoint, 64 texts a request."""
    with PipelineClient(MODEL, server.options.http_url) as kserve_client:
        answers = [
            kserve_client.infer({"TEXT": np.array([[t.encode()] for t in texts[i : i + 64]])})
            for i in range(0, len(texts), 64)
        ]
    return {k: np.concatenate([a[k] for a in answers]) for k in ("EMBEDDING", "TOKENS")}


def reference_tokens(reference_model, texts: list[str]) -> int:
    """Tokens sentence-transformers' tokenizer gives the texts (special tokens included,
    truncated to the model's 256)."""
    encoded = reference_model.tokenizer(texts, truncation=True, max_length=spec.MAX_SEQ_LENGTH)
    return sum(len(ids) for ids in encoded["input_ids"])


@pytest.mark.parametrize("encoding_format", [None, "float"], ids=["client-default", "float"])
def test_the_openai_client_gets_the_kserve_embeddings(
    server, client, reference_model, encoding_format
):
    """The client's default (it asks for base64 and decodes it) and floats: the same FP32
    values as KServe's, in order, with the usage counted as the model's tokenizer counts."""
    texts = [t for t in (LONG_PARAGRAPH, *SENTENCES, *real_texts(20)) if t][:48]  # OpenAI: no ""
    chosen = {} if encoding_format is None else {"encoding_format": encoding_format}
    before = requests_served(server)
    answer = client.embeddings.create(model=MODEL, input=texts, **chosen)
    assert requests_served(server) - before == 1  # one request of many texts = one batch
    got = np.array([d.embedding for d in answer.data], dtype=np.float32)
    want = kserve(server, texts)
    np.testing.assert_array_equal(got, want["EMBEDDING"])
    assert [d.index for d in answer.data] == list(range(len(texts)))
    assert answer.model == MODEL and answer.object == "list"
    tokens = reference_tokens(reference_model, texts)
    assert answer.usage.prompt_tokens == answer.usage.total_tokens == tokens
    assert int(want["TOKENS"].sum()) == tokens


def test_one_string_and_the_models_own_dimensions(server, client):
    one = client.embeddings.create(model=MODEL, input="health check", dimensions=spec.HIDDEN_SIZE)
    assert len(one.data) == 1 and len(one.data[0].embedding) == spec.HIDDEN_SIZE
    np.testing.assert_array_equal(
        np.array(one.data[0].embedding, np.float32),
        kserve(server, ["health check"])["EMBEDDING"][0],
    )


def test_more_texts_than_a_batch_are_split_into_batches_in_order(server, client):
    """150 texts (over the ensemble's max_batch_size of 64) become 3 KServe requests; the answer
    keeps the order."""
    texts = real_texts(150, seed=3)
    before = requests_served(server)
    answer = client.embeddings.create(model=MODEL, input=texts)
    assert requests_served(server) - before == 3
    got = np.array([d.embedding for d in answer.data], dtype=np.float32)
    np.testing.assert_array_equal(got, kserve(server, texts)["EMBEDDING"])


@pytest.mark.parametrize(
    ("arguments", "error", "param", "words"),
    [
        ({"input": "x", "dimensions": 64}, openai.BadRequestError, "dimensions", "dimensions"),
        ({"input": [[101, 2023]]}, openai.BadRequestError, "input", "token arrays"),
        ({"input": []}, openai.BadRequestError, "input", "non-empty"),
        ({"input": ["ok", ""]}, openai.BadRequestError, "input", "input[1]"),
        ({"input": "x", "model": "no_such_model"}, openai.NotFoundError, "model", "does not exist"),
        ({"input": "x" * 70_000}, openai.BadRequestError, "input", "over the limit"),
    ],
)
def test_refusals_come_in_openais_error_format(client, arguments, error, param, words):
    with pytest.raises(error) as caught:
        client.embeddings.create(**({"model": MODEL} | arguments))
    body = caught.value.body
    assert body["type"] == "invalid_request_error" and body["param"] == param
    assert words in body["message"]


def test_a_model_that_is_not_an_embedding_model_is_named(server):
    """A loaded model without the declaration: 400, not a KServe error from inside it."""
    request = urllib.request.Request(
        f"http://{server.options.http_url}/v1/embeddings",
        data=json.dumps({"model": "text_embedding_tokenize", "input": "x"}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=30)
    assert caught.value.code in (400, 404)
    error = json.loads(caught.value.read())["error"]
    assert error["param"] == "model" and "text_embedding_tokenize" in error["message"]


def test_base64_is_little_endian_fp32(server):
    """The wire format the client decodes: base64 of the FP32 bytes, little-endian."""
    request = urllib.request.Request(
        f"http://{server.options.http_url}/v1/embeddings",
        data=json.dumps(
            {"model": MODEL, "input": ["a", "b"], "encoding_format": "base64"}
        ).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        data = json.loads(reply.read())["data"]
    got = np.stack([np.frombuffer(base64.b64decode(d["embedding"]), "<f4") for d in data])
    np.testing.assert_array_equal(got, kserve(server, ["a", "b"])["EMBEDDING"])
