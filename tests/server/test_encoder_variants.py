"""The faster encoder versions: 3 (FP32 + ONNX Runtime fusions) and 4 (INT8 weight-only).

Checked against sentence-transformers on real mixed-length text, in ONNX Runtime and served
through the normal CPU config after a rollout (the way they go live).
"""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest

from reference_data import text_corpus as corpus
from tests.conftest import require_artifacts
from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.text import spec
from tritonrepo.text.pooling import l2_normalize
from tritonrepo.text.tokenization import TextTokenizer
from tritonrepo_client import EmbeddingClient, RepositoryClient, rollback
from tritonrepo_client.control.rollout import rollout

CONTROL_SERVER_MODELS = (spec.ENSEMBLE,)
ENCODER_DIR = MODEL_REPOSITORY / spec.ENCODER_MODEL
FUSED, INT8 = 3, 4
MIN_COSINE = {FUSED: 0.9999, INT8: 0.99}  # INT8: min cosine ≥ 0.99 on real text


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return corpus.real_texts(96, split="eval", seed=11)


@pytest.fixture(scope="module")
def expected(texts, reference_embed) -> np.ndarray:
    return reference_embed(texts)


@pytest.fixture(scope="module")
def tokenizer() -> TextTokenizer:
    require_artifacts()
    return TextTokenizer(
        MODEL_REPOSITORY / spec.TOKENIZE_MODEL / "1" / "tokenizer.json", spec.MAX_SEQ_LENGTH
    )


def embed_with(version: int, tokenizer: TextTokenizer, batches: list[list[str]]) -> np.ndarray:
    session = ort.InferenceSession(
        str(ENCODER_DIR / str(version) / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    out = []
    for batch in batches:
        ids, mask = tokenizer.encode(batch)
        (pooled,) = session.run(None, {"input_ids": ids, "attention_mask": mask})
        out.append(l2_normalize(pooled))
    return np.concatenate(out)


def test_versions_are_built_with_their_precision():
    require_artifacts()
    for version in (FUSED, INT8):
        meta = json.loads((ENCODER_DIR / str(version) / "build_metadata.json").read_text())
        assert meta["precision"] == spec.ENCODER_VERSIONS[version]
    fused = json.loads((ENCODER_DIR / str(FUSED) / "build_metadata.json").read_text())
    assert fused["fused_operators"]["Attention"] == 6  # one per layer
    assert fused["fused_operators"]["SkipLayerNormalization"] == 12


@pytest.mark.parametrize("version", [FUSED, INT8])
def test_matches_sentence_transformers_on_real_text(version, texts, expected, tokenizer):
    batches = [texts[i : i + 32] for i in range(0, len(texts), 32)]
    got = embed_with(version, tokenizer, batches)
    assert float((got * expected).sum(axis=1).min()) >= MIN_COSINE[version]


def test_int8_embedding_does_not_depend_on_its_batch(texts, tokenizer):
    together = embed_with(INT8, tokenizer, [texts[:32]])
    alone = embed_with(INT8, tokenizer, [[t] for t in texts[:32]])
    assert np.abs(together - alone).max() <= 1e-5


@pytest.mark.server
@pytest.mark.parametrize("version", [FUSED, INT8])
def test_version_goes_live_through_rollout(control_server, version, texts, expected):
    options = control_server.options
    with RepositoryClient(options.http_url, key=options.repository_key) as repo:
        report = rollout(repo, spec.ENCODER_MODEL, version)
        try:
            assert report.canary.ok and repo.versions(spec.ENCODER_MODEL) == [version]
            with EmbeddingClient(options.grpc_url, "grpc") as client:
                got = client.embed(texts)
                alone = np.concatenate([client.embed([t]) for t in texts[:8]])
            assert float((got * expected).sum(axis=1).min()) >= MIN_COSINE[version]
            # Served in one request with 95 neighbours or alone: the same embedding.
            assert np.abs(got[:8] - alone).max() <= 1e-5
        finally:
            rollback(repo, spec.ENCODER_MODEL)
        assert repo.versions(spec.ENCODER_MODEL) == [1]
