"""A description of several models served from a throw-away repository: the chain fixture
(``tests/unit/pipeline_fixtures/chain``: prepare -> first -> relu -> second -> finish, which
calls ``scale`` through its ``models`` argument; and ``total`` beside them, on the request too)
generated, built and served alone. The
launcher loads the called model with the pipeline; the answers equal numpy's; a request whose
call the model refuses gets that error (naming the called model) while the requests sent with
it are served, and the server stays up.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from builders.pipeline import generate
from builders.pipeline.build import build
from tests.conftest import server_options
from tests.unit.pipeline_fixtures.chain.description import CHAIN_PACKAGE, CHAIN_TOML
from tests.unit.pipeline_fixtures.toy import model as toy_model
from tritonrepo.description import load
from tritonrepo.server.launcher import TritonServer
from tritonrepo_client import ClientError, PipelineClient, RepositoryClient

pytestmark = pytest.mark.server

# A step beside the chain: it takes the request too, and makes a second response tensor.
BESIDE = f"""
[[output]]
name = "TOTAL"
dtype = "FP32"
dims = [1]

[[step]]
function = "{CHAIN_PACKAGE}.steps:total"
inputs = ["X"]
outputs = [{{ name = "TOTAL", dtype = "FP32", dims = [1] }}]
"""


def numpy_reference(x: np.ndarray) -> np.ndarray:
    """relu(x @ W + b) * 2 * 3 - 1, from the fixture's constants."""
    return np.maximum(x.astype(np.float64) @ toy_model.WEIGHTS + toy_model.BIAS, 0) * 6 - 1


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[TritonServer]:
    root = tmp_path_factory.mktemp("graph")
    description = root / "pipelines" / "toy" / "pipeline.toml"
    description.parent.mkdir(parents=True)
    description.write_text(CHAIN_TOML + BESIDE)
    repository = root / "model_repository"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(generate, "REPO_ROOT", root)
        argv = ["pipeline", "toy", "--from", str(description), "--repository", str(repository)]
        assert generate.main(argv) == 0
    assert build(load(description), repository) is not None
    options = server_options("test_graph_calls", model_repository=repository, models=("toy",))
    with TritonServer(options) as server:
        yield server


def test_the_called_model_is_loaded_with_the_pipeline(server: TritonServer):
    key = server.options.repository_key
    with RepositoryClient(server.options.http_url, "http", key=key) as repo:
        ready = {r.name for r in repo.index(30) if r.state == "READY"}
    assert {"toy", "toy_first", "toy_second", "toy_scale", "toy_finish", "toy_total"} <= ready


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_the_chain_answers_like_numpy(server: TritonServer, protocol: str):
    x = ((np.arange(32, dtype=np.float32) - 16) / np.float32(10)).reshape(8, 4)
    url = server.options.grpc_url if protocol == "grpc" else server.options.http_url
    with PipelineClient("toy", url, protocol) as client:
        got = client.infer({"X": x})
    np.testing.assert_allclose(got["OUT"], numpy_reference(x), rtol=1e-6, atol=1e-5)
    np.testing.assert_allclose(got["TOTAL"], x.astype(np.float64).sum(1, keepdims=True), atol=1e-6)


def test_a_refused_call_fails_its_own_request_and_the_others_are_served(server: TritonServer):
    good = np.array([[0.5, 0.25, -0.5, 1.0]], dtype=np.float32)
    bad = np.array([[1000.0, 0, 0, 0]], dtype=np.float32)  # doubled > BAD_CALL_ABOVE
    with PipelineClient("toy", server.options.http_url) as client:

        def one(x: np.ndarray):
            try:
                return client.infer({"X": x})["OUT"]
            except ClientError as exc:
                return exc

        order = [bad if n % 3 == 0 else good for n in range(12)]
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(one, order))
    for x, answer in zip(order, answers, strict=True):
        if x is bad:
            assert isinstance(answer, ClientError), answer
            assert "toy_scale" in str(answer) and "toy_finish" in str(answer), answer
        else:
            assert not isinstance(answer, Exception), answer
            np.testing.assert_allclose(answer, numpy_reference(good), rtol=1e-6, atol=1e-5)
    assert server.process is not None and server.process.poll() is None
