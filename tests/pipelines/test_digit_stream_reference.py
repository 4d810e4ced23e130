"""digit_stream served (HTTP and gRPC) against scikit-learn itself: 12 held-out digits, each
streamed row by row as one session (interleaved with the others), every event's PROBABILITIES
equal to the pipeline's own fitted scikit-learn classifier's ``predict_proba`` on the rows seen so
far (the rows not seen yet white, 0) within 1e-5, and DIGIT its ``predict``."""

import numpy as np
import pytest

from pipelines.digit_stream.model import fit, split
from tests.conftest import server_options
from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.server.launcher import TritonServer
from tritonrepo_client import TritonConnection

pytestmark = pytest.mark.server
NAME = "digit_stream"
TOL = 1e-5  # ONNX Runtime's logistic regression runs in FP32, scikit-learn in FP64
IMAGES = 12
OUTPUTS = ["DIGIT", "PROBABILITIES", "ROWS_SEEN"]


@pytest.fixture(scope="module")
def server():
    model_file = MODEL_REPOSITORY / f"{NAME}_model" / "1" / "model.onnx"
    if not model_file.is_file():
        pytest.fail(f"{model_file} is missing: run `make artifacts` (make test does it)")
    with TritonServer(server_options(f"pipeline-{NAME}-reference", models=(NAME,))) as server:
        yield server


def seen_so_far(image: np.ndarray, rows: int) -> np.ndarray:
    """FP64 ``[1, 64]``: the top ``rows`` rows of the 8x8 ``image``, the rest 0, row-major (the
    layout of ``load_digits().data``)."""
    partial = np.zeros((8, 8))
    partial[:rows] = image[:rows]
    return partial.reshape(1, 64)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_every_event_equals_scikit_learn_on_the_rows_seen(server, protocol):
    url = server.options.grpc_url if protocol == "grpc" else server.options.http_url
    images = split()[1][:IMAGES]
    classifier = fit()
    with TritonConnection(url, protocol) as conn:
        for row in range(8):  # row by row, all sessions interleaved
            for i, image in enumerate(images):
                answer = conn.infer(
                    NAME,
                    {"ROW": image[row : row + 1].astype(np.float32)},
                    OUTPUTS,
                    sequence_id=f"{protocol}-digit-{i}",
                    sequence_start=row == 0,
                    sequence_end=row == 7,
                )
                x = seen_so_far(image, row + 1)
                want = classifier.predict_proba(x)
                got = answer["PROBABILITIES"]
                assert got.shape == (1, 10) and got.dtype == np.float32
                diff = float(np.abs(got - want).max())
                assert diff <= TOL, (protocol, i, row, diff)
                assert answer["DIGIT"][0, 0] == classifier.predict(x)[0], (protocol, i, row)
                assert answer["ROWS_SEEN"][0, 0] == row + 1
