"""``text_embedding`` as one Python model (``one_step_gpu = true``; the torch_gpu set), on a
real server on this CPU.

The torch_gpu set serves text_embedding with :class:`tritonrepo.pipelines.chained_step.ChainedStep`:
tokenize → encoder program → normalise in one ``execute``, each stage set up from its own
model's config (``stages.json``). Here the encoder program is exported on the CPU in FP32 (as
``tests/artifacts/test_torch_export.py`` does) into a copy of the four model folders, and the
one-step model's instance group is changed from ``KIND_GPU`` to ``KIND_CPU`` in the copy (this
machine has no GPU; on a CPU instance every stage runs on the host): the stages, the tensors
passed between them, the dynamic batching and the per-request errors are the ones served on the
GPU. Reference: sentence-transformers (``reference_embed``), not the code under test. The GPU
run is tests/gpu/test_gpu_serving.py.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from reference_data.text_corpus import real_texts
from tests.conftest import server_options
from tests.one_step_on_cpu import largest_batch, one_step_on_cpu
from tests.sentences import LONG_PARAGRAPH, SENTENCES
from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.pipelines.chained_step import STAGES_FILE
from tritonrepo.server.launcher import TritonServer
from tritonrepo.text import spec
from tritonrepo_client import ClientError, EmbeddingClient
from tritonrepo_client.control.repository import RepositoryClient

pytestmark = pytest.mark.server

PIPELINE = "text_embedding"
STAGES = (spec.TOKENIZE_MODEL, spec.ENCODER_MODEL, spec.NORMALIZE_MODEL)


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    return tmp_path_factory.mktemp("one-step")


@pytest.fixture(scope="module")
def server(repository):
    one_step_on_cpu(repository, PIPELINE, STAGES, spec.ENCODER_MODEL)
    options = server_options(
        "one-step", model_repository=repository, model_config_name="torch_gpu", models=(PIPELINE,)
    )
    with TritonServer(options) as server:
        yield server


def test_stages_are_the_models_own_configs():
    """stages.json holds each stage's torch_gpu config as its own model folder has it."""
    from google.protobuf.json_format import MessageToDict

    from tritonrepo_format.configs import read_config

    stages = json.loads((MODEL_REPOSITORY / PIPELINE / "1" / STAGES_FILE).read_text())
    assert [s["model"] for s in stages] == list(STAGES)
    for stage in stages:
        own = read_config(MODEL_REPOSITORY, stage["model"], "torch_gpu")
        assert stage["config"] == MessageToDict(own, preserving_proto_field_name=True)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_embeddings_match_sentence_transformers(server, reference_embed, protocol):
    texts = [*SENTENCES, LONG_PARAGRAPH, *real_texts(40)]
    with EmbeddingClient(server.options.url(protocol), protocol=protocol) as client:
        got = np.concatenate([client.embed(texts[i : i + 16]) for i in range(0, len(texts), 16)])
    assert got.dtype == np.float32 and got.shape == (len(texts), spec.HIDDEN_SIZE)
    assert ((got * reference_embed(texts)).sum(axis=1)).min() > 0.9999


def test_concurrent_texts_and_a_bad_one_each_get_their_own_answer(server, reference_embed):
    """Single-text requests from 16 threads share dynamic batches; the text that is not UTF-8
    fails alone, with the stage and the reason named, and every other text is embedded."""
    texts: list[str | bytes] = list(real_texts(64, seed=11))
    texts[20] = b"\xff\xfe not utf-8"
    url = server.options.url("grpc")

    def one(text: str | bytes) -> np.ndarray | str:
        with EmbeddingClient(url, protocol="grpc") as client:
            try:
                return client.embed([text])[0]
            except ClientError as exc:
                return str(exc)

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(one, texts))
    error = answers.pop(20)
    assert isinstance(error, str) and "text_embedding_tokenize" in error and "UTF-8" in error
    del texts[20]
    got = np.stack(answers)  # type: ignore[arg-type]
    assert ((got * reference_embed(texts)).sum(axis=1)).min() > 0.9999
    assert largest_batch(server.options.http_url, PIPELINE) > 1, "no dynamic batch was formed"


def test_only_the_one_model_is_loaded(server):
    o = server.options
    with RepositoryClient(o.http_url, "http", key=o.repository_key or "") as repo:
        ready = {row.name for row in repo.index() if row.state == "READY"}
    assert ready == {PIPELINE}


def test_a_stage_that_fails_to_set_up_fails_the_load_by_name_and_the_old_one_serves(
    server, repository, reference_embed
):
    """A reload whose tokenize stage has a bad parameter fails with the stage, the parameter and
    the fix named; the version already loaded keeps answering."""
    path = repository / PIPELINE / "1" / STAGES_FILE
    good = path.read_text()
    stages = json.loads(good)
    stages[0]["config"]["parameters"]["max_seq_length"]["string_value"] = "abc"
    path.write_text(json.dumps(stages))
    o = server.options
    try:
        with (
            RepositoryClient(o.http_url, "http", key=o.repository_key or "") as repo,
            pytest.raises(ClientError) as caught,
        ):
            repo.load(PIPELINE)
    finally:
        path.write_text(good)
    message = str(caught.value)
    assert f"stage {spec.TOKENIZE_MODEL}: ParameterError" in message, message
    assert "max_seq_length" in message and "abc" in message, message
    with EmbeddingClient(o.url("http"), protocol="http") as client:
        got = client.embed(SENTENCES[:3])
    assert ((got * reference_embed(SENTENCES[:3])).sum(axis=1)).min() > 0.9999
