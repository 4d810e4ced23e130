"""The shipped text_embedding is its description's output (``pipelines/text_embedding``): every
config of its four models is up to date with it, and its health probe's expected embedding is
sentence-transformers' own, within a tolerance that tells another sentence apart.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2 as mc

from builders.pipeline import generate
from tritonrepo.description import load
from tritonrepo.paths import MODEL_REPOSITORY, PIPELINES, REPO_ROOT
from tritonrepo_client.connection import ClientError
from tritonrepo_client.control.probe_declaration import _check_output, declared_probe

DESCRIPTION = PIPELINES / "text_embedding" / "pipeline.toml"
MODELS = {
    "text_embedding",
    "text_embedding_tokenize",
    "text_embedding_encoder",
    "text_embedding_normalize",
}


def test_shipped_text_embedding_is_generated():
    assert generate.main(["pipeline", "text_embedding", "--check"]) == 0
    pipeline = load(DESCRIPTION)
    changes = generate.plan(pipeline, MODEL_REPOSITORY)
    assert {c.action for c in changes} == {"same"}
    recorded = json.loads((DESCRIPTION.parent / generate.MANIFEST).read_text())
    assert recorded["files"] == {c.path: generate._digest(c.text) for c in changes}
    for change in changes:
        assert (REPO_ROOT / change.path).read_text() == change.text, change.path
    assert {Path(c.path).parts[1] for c in changes} == MODELS
    configs = {c.path for c in changes if c.path.endswith(".pbtxt")}
    # 4 config.pbtxt, encoder cpu + torch_gpu + torch_aoti, 2 steps' torch_gpu, the one-step
    # GPU model
    assert len(configs) == 10


def probe() -> tuple[dict, object]:
    config = text_format.Parse(
        (MODEL_REPOSITORY / "text_embedding/config.pbtxt").read_text(), mc.ModelConfig()
    )
    as_json = json_format.MessageToDict(config, preserving_proto_field_name=True)
    declared = declared_probe(as_json, "text_embedding")
    assert declared is not None
    return as_json, declared


def test_the_probe_expects_sentence_transformers_embedding(reference_embed):
    _, declared = probe()
    texts = [t.decode() for t in declared.inputs["TEXT"].ravel()]
    (expected,) = declared.outputs
    assert (expected.name, expected.shape, expected.datatype) == ("EMBEDDING", (1, 384), "FP32")
    reference = reference_embed(texts)
    np.testing.assert_allclose(expected.data.reshape(1, 384), reference, rtol=0, atol=1e-6)
    _check_output(expected, reference.astype(np.float32))  # what the health check runs


@pytest.mark.parametrize("other", ["the cat sat on the mat", "health checks"])
def test_the_probe_tells_another_sentence_apart(reference_embed, other: str):
    _, declared = probe()
    (expected,) = declared.outputs
    with pytest.raises(ClientError, match="differs from the declared values"):
        _check_output(expected, reference_embed([other]).astype(np.float32))
