"""click_lightgbm served (HTTP and gRPC) against LightGBM itself: the click probabilities of the
sample rows (one per request) and of 256 held-out rows (batches of 64) equal
``LGBMClassifier.predict_proba`` of the pipeline's own fitted model within
``check_parity.TOL`` (1e-5; ONNX Runtime's trees run in FP32, LightGBM in FP64)."""

import numpy as np
import pytest

from pipelines.click_lightgbm.check_parity import TOL, reference
from pipelines.click_lightgbm.model import split
from pipelines.click_lightgbm.samples import samples
from tests.conftest import server_options
from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.server.launcher import TritonServer
from tritonrepo_client import PipelineClient

pytestmark = pytest.mark.server
NAME = "click_lightgbm"


@pytest.fixture(scope="module")
def server():
    model_file = MODEL_REPOSITORY / f"{NAME}_model" / "1" / "model.onnx"
    if not model_file.is_file():
        pytest.fail(f"{model_file} is missing: run `make artifacts` (make test does it)")
    with TritonServer(server_options(f"pipeline-{NAME}-reference", models=(NAME,))) as server:
        yield server


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_served_click_probabilities_equal_lightgbm(server, protocol):
    url = server.options.grpc_url if protocol == "grpc" else server.options.http_url
    rows = samples()["FEATURES"]
    held_out = split()[1][:256]
    with PipelineClient(NAME, url, protocol) as client:
        one_by_one = [client.infer({"FEATURES": rows[i : i + 1]}) for i in range(len(rows))]
        batched = [client.infer({"FEATURES": held_out[i : i + 64]}) for i in range(0, 256, 64)]
    for what, answers, x in (("samples", one_by_one, rows), ("held-out", batched, held_out)):
        got = np.concatenate([a["CLICK_PROBABILITY"] for a in answers])
        assert got.shape == (len(x), 1) and got.dtype == np.float32, (what, got.shape, got.dtype)
        np.testing.assert_allclose(got[:, 0], reference(x), rtol=0, atol=TOL, err_msg=what)
