"""A described pipeline whose ``build()`` returns a torch module (``digit_scans``), served in the
torch_gpu set from a ``torch.export`` program of that module, on a real server on this CPU.

``make artifacts`` saved the trained module (``digit_scans_model/1/module.pt``); here its program
is exported on the CPU in FP32 (what ``make artifacts-gpu`` does on the GPU host, in FP16 where
the gate holds) into a copy of the four model folders, and the one-step model's instance group
is changed from ``KIND_GPU`` to ``KIND_CPU`` in the copy (this machine has no GPU). Reference:
the saved module itself in PyTorch eager mode, after the pipeline's own preprocess function, and
the scans' true digits. The GPU run is ``make bench-gpu`` (its ``digit_scans`` section).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from builders.pipeline.graph import ModelSourceError
from builders.torch_programs import described_export
from pipelines.digit_scans.model import scans
from pipelines.digit_scans.steps import preprocess
from tests.conftest import server_options
from tests.one_step_on_cpu import largest_batch, one_step_on_cpu
from tritonrepo.description import load
from tritonrepo.paths import MODEL_REPOSITORY, PIPELINES
from tritonrepo.server.launcher import TritonServer
from tritonrepo_client import PipelineClient

pytestmark = pytest.mark.server

PIPELINE = "digit_scans"
MODELS = (PIPELINE, f"{PIPELINE}_preprocess", f"{PIPELINE}_model", f"{PIPELINE}_postprocess")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("described-torch")
    one_step_on_cpu(root, PIPELINE, MODELS[1:], f"{PIPELINE}_model")
    options = server_options(
        "described-torch", model_repository=root, model_config_name="torch_gpu", models=(PIPELINE,)
    )
    with TritonServer(options) as server:
        yield server


@pytest.fixture(scope="module")
def held_out() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """40 held-out scans UINT8 ``[40, 64, 64]``, their digits, and the saved module's softmax
    FP32 ``[40, 10]`` (eager PyTorch, FP32)."""
    pipeline = load(PIPELINES / PIPELINE / "pipeline.toml")
    saved = described_export.load_module(described_export.module_path(MODEL_REPOSITORY, pipeline))
    _, x_test, _, y_test = scans()
    images, digits = x_test[:40], y_test[:40]
    with torch.inference_mode():
        logits = saved["module"](torch.as_tensor(preprocess({"IMAGE": images})["pixels"]))
    return images, digits, torch.softmax(logits, dim=1).numpy()


def test_the_program_records_its_inputs_and_gate(server):
    metadata = json.loads(
        (
            server.options.model_repository / f"{PIPELINE}_model" / "1" / "torch_metadata.json"
        ).read_text()
    )
    assert metadata["inputs"] == {"pixels": ["batch", 1, 64, 64]}
    assert metadata["precision"] == "fp32" and metadata["max_batch"] == 128
    assert metadata["accuracy"]["min_cosine_vs_fp32"] >= 0.99999


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_answers_equal_the_torch_module(server, held_out, protocol):
    images, digits, want = held_out
    with PipelineClient(PIPELINE, server.options.url(protocol), protocol=protocol) as client:
        answers = [client.infer({"IMAGE": images[i : i + 8]}) for i in range(0, len(images), 8)]
    got = np.concatenate([a["PROBABILITIES"] for a in answers])
    digit = np.concatenate([a["DIGIT"] for a in answers]).reshape(-1)
    assert got.dtype == np.float32 and got.shape == (len(images), 10)
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert (digit == want.argmax(axis=1)).all()
    assert (digit == digits).mean() >= 0.9  # the trained network reads the scans


def test_concurrent_single_scans_share_dynamic_batches(server, held_out):
    images, _, want = held_out
    url = server.options.url("grpc")

    def one(i: int) -> np.ndarray:
        with PipelineClient(PIPELINE, url, protocol="grpc") as client:
            return client.infer({"IMAGE": images[i : i + 1]})["PROBABILITIES"][0]

    with ThreadPoolExecutor(16) as pool:
        got = np.stack(list(pool.map(one, range(len(images)))))
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert largest_batch(server.options.http_url, PIPELINE) > 1, "no dynamic batch was formed"


def test_a_build_that_returns_onnx_cannot_have_a_torch_program(tmp_path):
    """breast_cancer's build() returns an ONNX graph: with [model.torch_gpu] added, `make
    artifacts` refuses it and says what to return instead."""
    from builders.pipeline.build import build

    text = (PIPELINES / "breast_cancer" / "pipeline.toml").read_text()
    path = tmp_path / "breast_cancer" / "pipeline.toml"
    path.parent.mkdir()
    path.write_text(text.replace("[postprocess]", "[model.torch_gpu]\n\n[postprocess]"))
    with pytest.raises(ModelSourceError, match=r"returned an ONNX model.*torch\.nn\.Module"):
        build(load(path), tmp_path / "repository")
