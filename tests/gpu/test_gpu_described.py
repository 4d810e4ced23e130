"""A described pipeline whose core is a team's own torch module (``digit_scans``), served with
the torch_gpu config set on a real server and a real GPU: one Python model on the GPU running the
pipeline's functions around the module's ``torch.export`` program (``make artifacts-gpu``).
Reference: the module ``make artifacts`` saved, in eager PyTorch FP32 on the same GPU, and the
scans' true digits. Skipped without a CUDA GPU.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from benchmarks.gpu import described as gpu_described
from tests.conftest import GPU_SERVER_MARKS, server_options
from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.runners.torch_runner import METADATA_FILE
from tritonrepo.server.launcher import TritonServer
from tritonrepo_client import ClientError, PipelineClient

pytestmark = GPU_SERVER_MARKS
PIPELINE = gpu_described.PIPELINE
METADATA = MODEL_REPOSITORY / f"{PIPELINE}_model" / "1" / METADATA_FILE


@pytest.fixture(scope="module")
def server():
    if not METADATA.is_file():
        pytest.fail(f"{PIPELINE}_model has no torch program: run `make artifacts-gpu` here")
    options = server_options("gpu-described", model_config_name="torch_gpu", models=(PIPELINE,))
    with TritonServer(options) as server:
        yield server


@pytest.fixture(scope="module")
def scans():
    """40 held-out single-scan requests, their digits and the eager FP32 probabilities."""
    requests, digits = gpu_described.held_out()
    return requests[:40], digits[:40], gpu_described.reference(requests[:40], "cuda:0")


def test_the_program_was_exported_on_this_gpu():
    metadata = json.loads(METADATA.read_text())
    assert metadata["device"].startswith("cuda") and metadata["compute_capability"]
    assert metadata["accuracy"]["min_cosine_vs_fp32"] >= 0.999


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_concurrent_single_scans_match_the_eager_module(server, scans, protocol):
    requests, digits, want = scans
    tolerance = gpu_described.TOLERANCE[json.loads(METADATA.read_text())["precision"]]
    url = server.options.url(protocol)
    with PipelineClient(PIPELINE, url, protocol) as client, ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(client.infer, requests))
    got = np.concatenate([a["PROBABILITIES"] for a in answers])
    assert np.max(np.abs(got - want)) <= tolerance
    assert (np.concatenate([a["DIGIT"] for a in answers]).reshape(-1) == want.argmax(1)).all()
    assert (want.argmax(1) == digits).mean() >= 0.9


def test_a_blank_scan_gets_its_own_error_and_the_gpu_path_keeps_serving(server, scans):
    requests, _, want = scans
    with PipelineClient(PIPELINE, server.options.http_url) as client:
        with pytest.raises(ClientError, match="blank"):
            client.infer({"IMAGE": np.zeros((1, 64, 64), np.uint8)})
        got = client.infer(requests[0])["PROBABILITIES"]
    assert np.max(np.abs(got - want[:1])) <= 1e-2
