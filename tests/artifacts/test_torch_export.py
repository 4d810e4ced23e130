"""The torch_gpu config set's builder and runner, on the CPU (no server, no GPU needed).

``builders/torch_programs/export.py`` exports the real models here on the CPU in FP32 (the GPU host
does the same on its GPU in FP16); ``TorchRunner`` then serves ragged dynamic batches of them.
References are sentence-transformers and the trained PyTorch CTR network, not the code under test.
The served GPU path is tested by tests/gpu/test_gpu_serving.py (``make test-gpu``).
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch

from builders.gates.accuracy_gate import Tolerance
from builders.onnx_export import ctr_network
from builders.onnx_export.ctr import WEIGHTS
from builders.torch_programs import export as torch_export
from tests.program_cache import cpu_program, text_encoder_sources
from tests.sentences import SENTENCES
from tritonrepo.ctr import spec as ctr_spec
from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.runners.torch_runner import (
    METADATA_FILE,
    TorchRunner,
    check_program_metadata,
    torch_dtype,
)
from tritonrepo.step.errors import InvalidRequest
from tritonrepo.text import spec
from tritonrepo.text.pooling import l2_normalize, mean_pool, mean_pool_torch
from tritonrepo.text.tokenization import TextTokenizer


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    """A copy of the repository's configs (no artifacts) to build into."""
    root = tmp_path_factory.mktemp("repo")
    for model in torch_export.MODELS:
        shutil.copytree(MODEL_REPOSITORY / model / "configs", root / model / "configs")
        shutil.copy(MODEL_REPOSITORY / model / "config.pbtxt", root / model / "config.pbtxt")
    return root


@pytest.fixture(scope="module")
def encoder_program(repository):
    """The encoder's CPU FP32 program: exported once per run (``tests/program_cache.py``; the
    one-step server test needs the same program)."""
    metadata = cpu_program(spec.ENCODER_MODEL, repository, text_encoder_sources())
    return repository / spec.ENCODER_MODEL / "1" / "model.pt2", metadata


@pytest.fixture(scope="module")
def tokenizer():
    return TextTokenizer(
        MODEL_REPOSITORY / spec.TOKENIZE_MODEL / "1" / "tokenizer.json", spec.MAX_SEQ_LENGTH
    )


def test_encoder_build_writes_program_and_metadata(encoder_program):
    program, metadata = encoder_program
    assert program.is_file() and not (program.parent / "model.partial.pt2").exists()
    written = json.loads((program.parent / METADATA_FILE).read_text())
    assert written == metadata
    assert metadata["torch_version"] == torch.__version__
    assert metadata["max_batch"] == 512  # configs/torch_gpu.pbtxt's max_batch_size
    assert metadata["accuracy"]["min_cosine_vs_fp32"] >= torch_export.GATES["fp32"].min_cosine
    assert check_program_metadata(program) == metadata


def test_runner_serves_ragged_batches_like_sentence_transformers(
    encoder_program, tokenizer, reference_embed
):
    program, _ = encoder_program
    runner = TorchRunner(
        program,
        device="cpu",
        output_names=[spec.ENCODER_OUTPUT],
        output_dtypes={spec.ENCODER_OUTPUT: torch.float32},
        max_batch=3,  # forces the batch of 8 rows through three forward passes
        sequence_axis_inputs=spec.ENCODER_INPUTS,
    )
    groups = [SENTENCES[:1], SENTENCES[1:4], SENTENCES[4:6], SENTENCES[6:8]]
    requests = []
    for texts in groups:  # each request padded to its own longest text, as the tokenizer does
        ids, mask = tokenizer.encode(texts)
        requests.append(
            {"input_ids": torch.from_numpy(ids), "attention_mask": torch.from_numpy(mask)}
        )
    requests.insert(2, {"input_ids": requests[0]["input_ids"]})  # attention_mask missing
    results = runner.run_batch(requests)
    assert isinstance(results[2], InvalidRequest)
    del results[2], requests[2]
    got = []
    for request, result in zip(requests, results, strict=True):
        pooled = result[spec.ENCODER_OUTPUT]
        assert pooled.shape == (len(request["input_ids"]), spec.HIDDEN_SIZE)
        got.append(l2_normalize(pooled.numpy()))
    want = reference_embed(SENTENCES[:8])
    cosine = (np.concatenate(got) * want).sum(axis=1)
    assert cosine.min() > 0.99999


def test_program_from_another_torch_version_is_refused(encoder_program, tmp_path):
    program, metadata = encoder_program
    copy = tmp_path / "model.pt2"
    copy.symlink_to(program)
    (tmp_path / METADATA_FILE).write_text(json.dumps(metadata | {"torch_version": "1.0.0"}))
    with pytest.raises(RuntimeError, match="rebuild it here with `make artifacts-gpu`"):
        check_program_metadata(copy)
    (tmp_path / METADATA_FILE).unlink()
    with pytest.raises(FileNotFoundError, match="make artifacts-gpu"):
        check_program_metadata(copy)


def test_ctr_program_matches_pytorch(repository):
    metadata = torch_export.build(ctr_spec.CORE_MODEL, repository, "cpu", "fp32")
    assert metadata["accuracy"]["max_abs_ctr_diff_vs_fp32"] <= 1e-5
    runner = TorchRunner(
        repository / ctr_spec.CORE_MODEL / "1" / "model.pt2",
        device="cpu",
        output_names=[ctr_spec.CORE_OUTPUT],
        output_dtypes={ctr_spec.CORE_OUTPUT: torch.float32},
        max_batch=metadata["max_batch"],
    )
    rows = np.random.default_rng(0).integers(0, ctr_spec.VOCAB_SIZE, (40, ctr_spec.SEQ_LENGTH))
    requests = [{ctr_spec.CORE_INPUT: torch.from_numpy(rows[a:b])} for a, b in ((0, 1), (1, 40))]
    got = np.concatenate([r[ctr_spec.CORE_OUTPUT].numpy() for r in runner.run_batch(requests)])
    want = ctr_network.predict(ctr_network.load(WEIGHTS), rows)
    np.testing.assert_allclose(got.reshape(-1), want, atol=1e-5, rtol=0)


def test_failed_gate_writes_nothing(repository, monkeypatch):
    strict = Tolerance(min_cosine=1.1, max_ctr_diff=-1.0, max_auc_change=-1.0)  # unmeetable
    monkeypatch.setitem(torch_export.GATES, "fp32", strict)
    # Unmeetable on any rows: 256 spare the 4,096-row evaluation (16 s on 2 cores).
    monkeypatch.setattr(torch_export, "GATE_ROWS", 256)
    target = repository / ctr_spec.CORE_MODEL / "1"
    before = {p.name: p.stat().st_mtime_ns for p in target.iterdir()} if target.is_dir() else {}
    with pytest.raises(RuntimeError, match="accuracy gate"):
        torch_export.build(ctr_spec.CORE_MODEL, repository, "cpu", "fp32")
    after = {p.name: p.stat().st_mtime_ns for p in target.iterdir()} if target.is_dir() else {}
    assert after == before


def test_torch_pooling_matches_numpy():
    rng = np.random.default_rng(1)
    for batch, seq in ((1, 5), (3, 12), (2, 1)):
        tokens = rng.normal(size=(batch, seq, 8)).astype(np.float32)
        mask = (rng.random((batch, seq)) < 0.7).astype(np.int64)
        mask[:, 0] = 1
        got = mean_pool_torch(torch.from_numpy(tokens).half(), torch.from_numpy(mask))
        assert got.dtype == torch.float32  # sums in FP32 whatever the encoder's precision
        want = mean_pool(tokens.astype(np.float16), mask)
        np.testing.assert_allclose(got.numpy(), want, atol=1e-6)
    none = mean_pool_torch(torch.zeros(1, 4, 8), torch.zeros(1, 4, dtype=torch.int64))
    assert not none.any()  # a row with no token is zeros, not NaN


def test_config_types_map_to_torch():
    assert torch_dtype("TYPE_FP16") is torch.float16
    assert torch_dtype("TYPE_INT64") is torch.int64
    with pytest.raises(ValueError, match="TYPE_STRING"):
        torch_dtype("TYPE_STRING")
