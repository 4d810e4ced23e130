"""The torch_gpu config set on a real server and a real GPU (``make test-gpu``).

Every core model of the set serves on the GPU: text_embedding (one Python model on the GPU,
``one_step_gpu``: tokenizer and normalisation on the host, encoder and mean pooling in one
program on the GPU, one host copy per batch; the encoder and the steps as models of their own),
ctr_ranking and ctr_session (ctr_model on the GPU). References: sentence-transformers in FP32
and the trained PyTorch CTR network, not the code under test. Skipped without a CUDA GPU.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from builders.torch_programs import export as torch_export
from reference_data.text_corpus import real_texts
from tests.conftest import GPU_SERVER_MARKS, server_options
from tests.sentences import LONG_PARAGRAPH, SENTENCES
from tests.server.test_ctr import reference_rows
from tritonrepo.ctr import spec as ctr_spec
from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.runners.torch_runner import METADATA_FILE
from tritonrepo.server.launcher import TritonServer
from tritonrepo.text import spec
from tritonrepo.text.tokenization import TextTokenizer
from tritonrepo_client import ClientError, EmbeddingClient, RankingClient, SessionClient
from tritonrepo_client.control.repository import RepositoryClient

pytestmark = GPU_SERVER_MARKS
PROTOCOLS = ["http", "grpc"]
MIN_COSINE = torch_export.GATES["fp16"].min_cosine  # served FP16 vs sentence-transformers FP32


def ctr_tolerance() -> float:
    """Served CTR vs PyTorch FP32: the accuracy gate of the precision the program was built in
    (``make artifacts-gpu`` falls back to FP32 where FP16 fails its gate)."""
    metadata = json.loads(
        (MODEL_REPOSITORY / ctr_spec.CORE_MODEL / "1" / METADATA_FILE).read_text()
    )
    return torch_export.GATES[metadata["precision"]].max_ctr_diff


# The models whose requests carry no BYTES tensor (a choice of this test, not the core models).
NO_BYTES_MODELS = ("ctr_ranking", "ctr_session", spec.ENCODER_MODEL, spec.NORMALIZE_MODEL)


def start(name: str, models: tuple[str, ...]):
    for model in torch_export.MODELS:
        if not (MODEL_REPOSITORY / model / "1" / METADATA_FILE).is_file():
            pytest.fail(f"{model} has no torch program: run `make artifacts-gpu` on this host")
    return TritonServer(server_options(name, model_config_name="torch_gpu", models=models))


@pytest.fixture(scope="module")
def gpu_server():
    """The embedded server with the torch_gpu config set and text_embedding (the described
    pipelines with steps of their own, e.g. nudenet_detector, need their packages on the GPU
    host; make gpu-pack carries what the shipped cores need)."""
    with start("gpu", (spec.ENSEMBLE,)) as server:
        yield server


@pytest.fixture(scope="module")
def core_server():
    """The torch_gpu set without the text_embedding ensemble and its tokenizer: the models
    whose requests carry no BYTES tensor (see test_encoder_and_normalize_steps_on_the_gpu)."""
    with start("gpu-core", NO_BYTES_MODELS) as server:
        yield server


@pytest.fixture(scope="module")
def gpu_reference():
    """texts -> FP32 [n, 384] from sentence-transformers in FP32 on the GPU."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(spec.source_model_dir()), device="cuda")

    def embed(texts: list[str]) -> np.ndarray:
        return model.encode(list(texts), normalize_embeddings=True, batch_size=64)

    return embed


def cosines(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    return (got * want).sum(axis=1)


def test_every_core_model_runs_on_the_gpu(core_server):
    o = core_server.options
    with RepositoryClient(o.http_url, "http", key=o.repository_key or "") as repo:
        for model in (spec.ENCODER_MODEL, ctr_spec.CORE_MODEL):
            config = repo.config(model)
            assert {g["kind"] for g in config["instance_group"]} == {"KIND_GPU"}, model
            assert config["backend"] == "torch_python"
        log = core_server.options.log_file.read_text()
        assert f"{spec.ENCODER_MODEL}: 35 CUDA graphs captured" in log, "graphs were not captured"


def test_encoder_and_normalize_steps_on_the_gpu(core_server, gpu_reference):
    """The steps called directly with the tokenizer's output, from 16 threads at once: ragged
    requests joined on the host, run on the GPU (CUDA graphs for small batches) and pooled in
    the program; FP32 ``[1, 384]`` host rows reach the normalisation step, with the token count
    the tokenize step sends beside them (INT32 ``[1, 1]``), which comes back as ``TOKENS``."""
    import tritonclient.grpc as grpcclient

    tokenizer = TextTokenizer(
        MODEL_REPOSITORY / spec.TOKENIZE_MODEL / "1" / "tokenizer.json", spec.MAX_SEQ_LENGTH
    )
    texts = real_texts(48, seed=7)
    client = grpcclient.InferenceServerClient(core_server.options.grpc_url)

    def infer(model: str, arrays: dict[str, np.ndarray]):
        tensors = []
        for name, array in arrays.items():
            dtype = {"int64": "INT64", "int32": "INT32", "float32": "FP32"}[array.dtype.name]
            tensors.append(grpcclient.InferInput(name, list(array.shape), dtype))
            tensors[-1].set_data_from_numpy(array)
        return client.infer(model, tensors)

    def embed(text: str) -> np.ndarray:
        ids, mask = tokenizer.encode([text])
        encoded = infer(spec.ENCODER_MODEL, {"input_ids": ids, "attention_mask": mask})
        pooled = encoded.as_numpy(spec.ENCODER_OUTPUT)
        assert pooled.dtype == np.float32 and pooled.shape == (1, spec.HIDDEN_SIZE)
        tokens = mask.sum(axis=1, dtype=np.int32).reshape(-1, 1)
        normalized = infer(
            spec.NORMALIZE_MODEL, {spec.ENCODER_OUTPUT: pooled, "token_count": tokens}
        )
        assert normalized.as_numpy("TOKENS").tolist() == tokens.tolist()
        return normalized.as_numpy("EMBEDDING")[0]

    try:
        with ThreadPoolExecutor(16) as pool:
            got = np.stack(list(pool.map(embed, texts)))
    finally:
        client.close()
    assert cosines(got, gpu_reference(texts)).min() >= MIN_COSINE


def test_text_embedding_is_one_model_on_the_gpu(gpu_server):
    """In this set text_embedding is one Python model with GPU instances (its stages run in one
    execute); its encoder stage captured its CUDA graphs in that process."""
    o = gpu_server.options
    with RepositoryClient(o.http_url, "http", key=o.repository_key or "") as repo:
        config = repo.config(spec.ENSEMBLE)
        assert config["backend"] == "python" and config.get("platform", "") != "ensemble"
        assert {g["kind"] for g in config["instance_group"]} == {"KIND_GPU"}
        loaded = {row.name for row in repo.index() if row.state == "READY"}
    assert spec.TOKENIZE_MODEL not in loaded, "the one-step model needs no step models"
    log = o.log_file.read_text()
    assert f"{spec.ENCODER_MODEL}: 35 CUDA graphs captured" in log, "graphs were not captured"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_text_embedding_matches_sentence_transformers(gpu_server, gpu_reference, protocol):
    texts = [*SENTENCES, LONG_PARAGRAPH, *real_texts(120)]
    with EmbeddingClient(gpu_server.options.url(protocol), protocol=protocol) as client:
        got = np.concatenate([client.embed(texts[i : i + 64]) for i in range(0, len(texts), 64)])
    assert got.dtype == np.float32 and got.shape == (len(texts), spec.HIDDEN_SIZE)
    assert cosines(got, gpu_reference(texts)).min() >= MIN_COSINE


def test_concurrent_single_texts_batch_on_the_gpu_and_stay_correct(gpu_server, gpu_reference):
    """Requests of different lengths joined by the dynamic batcher (ragged, padded on the GPU)
    each get their own text's embedding."""
    texts = real_texts(256, seed=5)
    url = gpu_server.options.url("grpc")

    def one(text: str) -> np.ndarray:
        with EmbeddingClient(url, protocol="grpc") as client:
            return client.embed([text])[0]

    with ThreadPoolExecutor(32) as pool:
        got = np.stack(list(pool.map(one, texts)))
    assert cosines(got, gpu_reference(texts)).min() >= MIN_COSINE


def test_bad_text_gets_its_own_error_and_the_gpu_path_keeps_serving(gpu_server, gpu_reference):
    with EmbeddingClient(gpu_server.options.url("grpc"), protocol="grpc") as client:
        with pytest.raises(ClientError, match="UTF-8"):
            client.embed([b"\xff\xfe not utf-8"])
        got = client.embed(SENTENCES[:4])
    assert cosines(got, gpu_reference(SENTENCES[:4])).min() >= MIN_COSINE


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_ctr_ranking_matches_pytorch(core_server, protocol):
    from builders.onnx_export import ctr_network
    from builders.onnx_export.ctr import WEIGHTS

    model = ctr_network.load(WEIGHTS)
    rng = np.random.default_rng(11)
    tolerance = ctr_tolerance()
    with RankingClient(core_server.options.url(protocol), protocol=protocol) as client:
        for _ in range(6):
            history = rng.integers(1, 10_000, size=int(rng.integers(0, 100))).tolist()
            candidates = rng.integers(1, 10_000, size=int(rng.integers(1, 512))).tolist()
            want = ctr_network.predict(model, reference_rows(history, candidates))
            result = client.rank(history, candidates, top_k=len(candidates))
            by_id = dict(zip(candidates, want, strict=True))
            np.testing.assert_allclose(
                [by_id[int(i)] for i in result.item_ids], result.scores, atol=tolerance, rtol=0
            )
            assert (np.diff(result.scores) <= 0).all()


def test_ctr_session_equals_ranking_on_the_full_history(core_server):
    rng = np.random.default_rng(12)
    events = rng.integers(1, 10_000, size=20).tolist()
    candidates = rng.integers(1, 10_000, size=50).tolist()
    url = core_server.options.url("grpc")
    with SessionClient(url, protocol="grpc") as sessions, RankingClient(url, protocol="grpc") as rk:
        session = sessions.session(f"gpu-{rng.integers(1 << 30)}")
        for i, item in enumerate(events):
            got = session.send(item, candidates, end=i == len(events) - 1)
        want = rk.rank(events, candidates, top_k=len(candidates))
    by_id = dict(zip(want.item_ids.tolist(), want.scores, strict=True))
    np.testing.assert_allclose([by_id[int(i)] for i in got.item_ids], got.scores, atol=1e-6)
