"""The tests every graph description (``[models.<key>]`` and ``[[step]]``) gets:
``tests/pipelines/test_<name>.py`` (written by ``tritonrepo-new``) subclasses
:class:`GraphSuite` with its description.

The served pipeline (a server of the class's own, CPU configs, the pipeline alone: the launcher
loads the ensemble's steps and the models its steps call) is compared with the same functions
and models run in one process (:class:`builders.pipeline.graph_in_process.GraphInProcess` on
the built ``model.onnx`` files), over HTTP and gRPC, all rows in one request and one row per
request; the declared health probe passes; a request with a bad value gets its own error while
the others sent with it are served, and the server stays up.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from builders.pipeline.graph_in_process import GraphInProcess
from tests.conftest import server_options
from tests.pipeline_suite import PROTOCOLS, assert_same, bad_value
from tritonrepo.description import GraphPipeline, import_ref, load
from tritonrepo.paths import MODEL_REPOSITORY, REPO_ROOT
from tritonrepo.server.launcher import TritonServer
from tritonrepo_client import ClientError, PipelineClient
from tritonrepo_client.connection import TritonConnection
from tritonrepo_client.control.health import check_health

CONCURRENCY = 4  # threads sending single-row requests at once


def built_models(pipeline: GraphPipeline) -> dict:
    """``{core key: built model.onnx}``; fails the test naming a missing one."""
    paths = {
        key: MODEL_REPOSITORY / c.model / str(c.versions[0]) / "model.onnx"
        for key, c in pipeline.cores.items()
    }
    missing = [str(p) for p in paths.values() if not p.is_file()]
    if missing:
        pytest.fail(f"{', '.join(missing)} missing: run `make artifacts` (make test does it)")
    return paths


def rows_of(tensors: dict, start: int, stop: int) -> dict:
    return {k: np.asarray(v)[start:stop] for k, v in tensors.items()}


class GraphSuite:
    """The tests of a graph description (module docstring); ``DESCRIPTION`` is its
    ``pipeline.toml``, relative to the checkout."""

    DESCRIPTION = ""

    @pytest.fixture(scope="class")
    @classmethod
    def pipeline(cls) -> GraphPipeline:
        pipeline = load(REPO_ROOT / cls.DESCRIPTION)
        assert isinstance(pipeline, GraphPipeline), f"{cls.DESCRIPTION} is not a graph"
        return pipeline

    @pytest.fixture(scope="class")
    @classmethod
    def samples(cls, pipeline: GraphPipeline) -> dict:
        rows = import_ref(pipeline.samples or "")()
        count = min(len(next(iter(rows.values()))), pipeline.max_batch_size)
        return rows_of(rows, 0, count)

    @pytest.fixture(scope="class")
    @classmethod
    def want(cls, pipeline: GraphPipeline, samples: dict) -> dict:
        return GraphInProcess(pipeline, built_models(pipeline))(samples)

    @pytest.fixture(scope="class")
    @classmethod
    def server(cls, pipeline: GraphPipeline):
        built_models(pipeline)
        options = server_options(f"pipeline-{pipeline.name}", models=(pipeline.name,))
        with TritonServer(options) as server:
            yield server

    @pytest.mark.parametrize("protocol", PROTOCOLS)
    def test_served_equals_in_process_in_one_request_and_row_by_row(
        self, pipeline, samples, want, server, protocol
    ):
        rows = len(next(iter(samples.values())))
        url = server.options.grpc_url if protocol == "grpc" else server.options.http_url
        with PipelineClient(pipeline.name, url, protocol) as client:
            assert_same(client.infer(samples), want, f"{protocol}, {rows} rows in one request")
            for i in range(rows):
                assert_same(
                    client.infer(rows_of(samples, i, i + 1)),
                    rows_of(want, i, i + 1),
                    f"{protocol}, row {i} alone",
                )

    def test_the_declared_health_probe_passes(self, pipeline, server):
        with TritonConnection(server.options.http_url) as conn:
            checks = check_health(conn, [pipeline.name])
        assert all(c.ok for c in checks), [c for c in checks if not c.ok]
        assert any(c.name == f"{pipeline.name} inference" for c in checks), checks

    def test_a_bad_value_fails_its_own_request_and_the_others_are_served(
        self, pipeline, samples, want, server
    ):
        bad = bad_value(pipeline, samples)  # type: ignore[arg-type]
        rows = len(next(iter(samples.values())))
        order = [-1 if n % 3 == 0 else n % rows for n in range(3 * CONCURRENCY)]
        with PipelineClient(pipeline.name, server.options.http_url) as client:

            def one(i: int):
                try:
                    return client.infer(bad if i < 0 else rows_of(samples, i, i + 1))
                except ClientError as exc:
                    return exc

            with ThreadPoolExecutor(CONCURRENCY) as pool:
                answers = list(pool.map(one, order))
        first = pipeline.steps[0].python  # None: a core model takes the request first
        for i, answer in zip(order, answers, strict=True):
            if i < 0:
                assert isinstance(answer, ClientError), f"the bad request was served: {answer}"
                assert first is None or first.model in str(answer), answer
            else:
                assert not isinstance(answer, Exception), answer
                assert_same(answer, rows_of(want, i, i + 1), f"row {i}")
        assert server.process is not None and server.process.poll() is None
