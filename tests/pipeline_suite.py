"""The tests every described pipeline gets: ``tests/pipelines/test_<name>.py`` (written by
``tritonrepo-new``) subclasses :class:`PipelineSuite` with its description.

The served pipeline (a server of the class's own, CPU configs, the pipeline alone) is compared
with the same functions and model called in one process (preprocess → ONNX Runtime on the
built ``model.onnx`` → postprocess), over HTTP and gRPC, one row per request and all rows in
one request; concurrent single-row requests (joined by the dynamic batchers) each get their own
answer; the one-step CPU model equals the ensemble (on a server of its own); the declared
health probe passes; a request with a bad value gets its own error while the others of the
batch are served; a request with wrong dims is refused by Triton; a value the client's cast
would change (``1e40`` for an FP32 input) is refused before anything is sent.
"""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient

from builders.pipeline.in_process import InProcess
from builders.pipeline.serving_forms.fused_cpu import fused_refusal
from tests.conftest import server_options
from tests.server.test_pipeline_client import requests_served
from tritonrepo.description import Pipeline, import_ref, load
from tritonrepo.paths import MODEL_REPOSITORY, REPO_ROOT
from tritonrepo.server.launcher import TritonServer
from tritonrepo_client import ClientError, PipelineClient
from tritonrepo_client.connection import TritonConnection
from tritonrepo_client.control.health import check_health

PROTOCOLS = ["http", "grpc"]
ATOL = RTOL = 1e-5  # served vs in-process, FP32 (the same ONNX Runtime graph, another batch)
CONCURRENCY = 8  # threads sending single-row requests at once


def in_process(pipeline: Pipeline, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The pipeline in this process: the description's functions and the built core model
    (ONNX Runtime, CPU), on batch-first ``inputs``."""
    core = pipeline.core
    path = MODEL_REPOSITORY / core.model / str(core.versions[0]) / "model.onnx"
    return InProcess(pipeline, path)(inputs)


def assert_same(got: dict[str, np.ndarray], want: dict[str, Any], where: str) -> None:
    """Every wanted output equal: numbers within ATOL + RTOL x |want|, BYTES exactly."""
    for name, value in want.items():
        expected = np.asarray(value)
        assert name in got, f"{where}: {name} missing from {sorted(got)}"
        actual = got[name]
        assert actual.shape == expected.shape, f"{where}: {name} {actual.shape} != {expected.shape}"
        if expected.dtype.kind in "OSU":
            as_bytes = [x if isinstance(x, bytes) else str(x).encode() for x in expected.ravel()]
            assert list(actual.ravel()) == as_bytes, f"{where}: {name} differs"
        elif expected.dtype.kind == "f":
            np.testing.assert_allclose(actual, expected, atol=ATOL, rtol=RTOL, err_msg=where)
        else:
            np.testing.assert_array_equal(actual, expected, err_msg=where)


def bad_value(pipeline: Pipeline, samples: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One row of the samples with its first input spoiled: BYTES items replaced by bytes no
    parser takes, numbers by NaN (integers: their dtype's minimum)."""
    first = pipeline.inputs[0]
    row = {k: np.asarray(v[:1]).copy() for k, v in samples.items()}
    value = row[first.name]
    if value.dtype == object:
        value[...] = b"\x00 not a valid value \xff"
    elif value.dtype.kind == "f":
        value[...] = np.nan
    else:
        value[...] = np.iinfo(value.dtype).min
    return row


class DescribedSuite:
    """The generated suites' base: subclasses set ``DESCRIPTION`` (the ``pipeline.toml`` path,
    relative to the checkout); ``pipeline`` is that description, read once per class."""

    DESCRIPTION = ""

    @pytest.fixture(scope="class")
    @classmethod
    def pipeline(cls) -> Pipeline:
        return load(REPO_ROOT / cls.DESCRIPTION)


class PipelineSuite(DescribedSuite):
    """The tests of a stateless described pipeline (the module docstring)."""

    @pytest.fixture(scope="class")
    @classmethod
    def samples(cls, pipeline: Pipeline) -> dict[str, np.ndarray]:
        return dict(import_ref(pipeline.samples)())

    @pytest.fixture(scope="class")
    @classmethod
    def server(cls, pipeline: Pipeline):
        core = pipeline.core
        model_file = MODEL_REPOSITORY / core.model / str(core.versions[0]) / "model.onnx"
        if not model_file.is_file():
            pytest.fail(f"{model_file} is missing: run `make artifacts` (make test does it)")
        # The pipeline alone; the launcher also loads the models its steps declare they call
        # through BLS (``calls``: ServerOptions.load_models).
        options = server_options(f"pipeline-{pipeline.name}", models=(pipeline.name,))
        with TritonServer(options) as server:
            yield server

    @pytest.mark.parametrize("protocol", PROTOCOLS)
    def test_served_equals_in_process_row_by_row_and_in_one_request(
        self, pipeline, samples, server, protocol
    ):
        rows = min(len(next(iter(samples.values()))), pipeline.max_batch_size)
        batch = {k: np.asarray(v[:rows]) for k, v in samples.items()}
        want = in_process(pipeline, batch)
        url = server.options.grpc_url if protocol == "grpc" else server.options.http_url
        with PipelineClient(pipeline.name, url, protocol) as client:
            assert_same(client.infer(batch), want, f"{protocol}, {rows} rows in one request")
            for i in range(rows):
                got = client.infer({k: v[i : i + 1] for k, v in batch.items()})
                assert_same(got, {k: np.asarray(v)[i : i + 1] for k, v in want.items()},
                            f"{protocol}, row {i} alone")  # fmt: skip

    def test_concurrent_single_rows_each_get_their_own_answer(self, pipeline, samples, server):
        rows = len(next(iter(samples.values())))
        want = in_process(pipeline, samples)
        with PipelineClient(pipeline.name, server.options.http_url) as client:

            def one(i: int) -> dict[str, np.ndarray]:
                return client.infer({k: v[i : i + 1] for k, v in samples.items()})

            with ThreadPoolExecutor(CONCURRENCY) as pool:
                answers = list(pool.map(one, [i % rows for i in range(4 * rows)]))
        for n, got in enumerate(answers):
            i = n % rows
            assert_same(got, {k: np.asarray(v)[i : i + 1] for k, v in want.items()}, f"row {i}")

    def test_the_declared_health_probe_passes(self, pipeline, server):
        with TritonConnection(server.options.http_url) as conn:
            checks = check_health(conn, [pipeline.name])
        assert all(c.ok for c in checks), [c for c in checks if not c.ok]
        assert any(c.name == f"{pipeline.name} inference" for c in checks), checks

    def test_a_bad_value_fails_its_own_request_and_the_others_are_served(
        self, pipeline, samples, server
    ):
        bad = bad_value(pipeline, samples)
        rows = len(next(iter(samples.values())))
        want = in_process(pipeline, samples)
        with PipelineClient(pipeline.name, server.options.http_url) as client:

            def one(i: int) -> dict[str, np.ndarray] | Exception:
                inputs = bad if i < 0 else {k: v[i : i + 1] for k, v in samples.items()}
                try:
                    return client.infer(inputs)
                except ClientError as exc:
                    return exc

            order = [-1 if n % 4 == 0 else n % rows for n in range(4 * CONCURRENCY)]
            with ThreadPoolExecutor(CONCURRENCY) as pool:
                answers = list(pool.map(one, order))
        for i, answer in zip(order, answers, strict=False):
            if i < 0:
                assert isinstance(answer, ClientError), f"the bad request was served: {answer}"
                # The ensemble's preprocess step answers, or the one-step CPU model's.
                message = str(answer)
                assert pipeline.preprocess.model in message or (
                    f"{pipeline.name}: preprocess: " in message
                ), answer
            else:
                assert not isinstance(answer, Exception), answer
                assert_same(
                    answer, {k: np.asarray(v)[i : i + 1] for k, v in want.items()}, f"row {i}"
                )
        assert server.process is not None and server.process.poll() is None

    def test_the_one_step_cpu_model_equals_the_ensemble(self, pipeline, samples, server, tmp_path):
        """The CPU set's one-step model (preprocess, core and postprocess in one Python-backend
        step, ``builders.pipeline.serving_forms.fused_cpu``) against the ensemble of
        ``config.pbtxt`` with its steps and core in their CPU configs, served by a throwaway
        server of its own (a repository whose pipeline folder has no ``configs/``), over HTTP on
        every sample row: one request of all rows and one row per request."""
        if fused_refusal(pipeline) is not None:
            pytest.skip(f"{pipeline.name} has no one-step CPU model: {fused_refusal(pipeline)}")
        rows = min(len(next(iter(samples.values()))), pipeline.max_batch_size)
        batch = {k: np.asarray(v[:rows]) for k, v in samples.items()}
        repository = tmp_path / "model_repository"
        repository.mkdir()
        for model in MODEL_REPOSITORY.iterdir():
            if model.name != pipeline.name:
                (repository / model.name).symlink_to(model, target_is_directory=True)
        shutil.copytree(MODEL_REPOSITORY / pipeline.name, repository / pipeline.name,
                        ignore=shutil.ignore_patterns("configs", "__pycache__"))  # fmt: skip

        def answers(url: str) -> list[dict[str, np.ndarray]]:
            with PipelineClient(pipeline.name, url) as client:
                whole = client.infer(batch)
                return [whole] + [
                    client.infer({k: v[i : i + 1] for k, v in batch.items()}) for i in range(rows)
                ]

        one_step = answers(server.options.http_url)
        options = server_options(
            f"pipeline-{pipeline.name}-ensemble", model_repository=repository,
            models=(pipeline.name,),
        )  # fmt: skip
        with TritonServer(options):
            control = httpclient.InferenceServerClient(options.http_url)
            try:
                config = control.get_model_config(pipeline.name)
            finally:
                control.close()
            assert config.get("platform") == "ensemble", config
            composed = answers(options.http_url)
        assert_same(one_step[0], composed[0], f"{rows} rows in one request")
        for i, (got, want) in enumerate(zip(one_step[1:], composed[1:], strict=True)):
            assert_same(got, want, f"row {i} alone")

    def test_a_value_a_cast_would_change_is_refused_before_sending(self, pipeline, samples, server):
        """The client casts to an input's datatype only when no value changes meaning
        (docs/pipeline_client.md): a float64 beyond an FP32/FP16 input's range (not sent as
        inf), a fraction for an integer input; the error names the input and the value, and
        Triton's inference statistics do not move."""
        numeric = [t for t in pipeline.inputs if t.dtype.startswith(("FP", "INT", "UINT"))]
        numeric = [t for t in numeric if t.dtype != "FP64"]  # every float64 fits
        if not numeric:
            pytest.skip(f"{pipeline.name} has no FP16/FP32 or integer input")
        first = numeric[0]
        row = {k: np.asarray(v[:1]) for k, v in samples.items()}
        value = row[first.name].astype(np.float64)
        value.flat[0] = 1e40 if first.dtype.startswith("FP") else 0.5
        words = "1e+40 at index" if first.dtype.startswith("FP") else "0.5 at index"
        with PipelineClient(pipeline.name, server.options.http_url) as client:
            client.signature()  # metadata and config: not counted as inferences
            before = requests_served(server, pipeline.name)
            with pytest.raises(ValueError) as info:
                client.infer(row | {first.name: value})
            assert requests_served(server, pipeline.name) == before
        message = str(info.value)
        assert message.startswith(f"input {first.name} is {first.dtype} ") and words in message

    def test_wrong_dims_are_refused_by_triton(self, pipeline, samples, server):
        first = pipeline.inputs[0]
        value = np.asarray(samples[first.name][:1])
        wrong = np.concatenate([value, value], axis=-1)  # last dim doubled
        tensor = httpclient.InferInput(first.name, list(wrong.shape), first.dtype)
        if first.dtype == "BYTES":
            tensor.set_data_from_numpy(wrong.astype(object))
        else:
            tensor.set_data_from_numpy(wrong)
        client = httpclient.InferenceServerClient(server.options.http_url)
        try:
            with pytest.raises(Exception) as caught:
                client.infer(pipeline.name, [tensor])
        finally:
            client.close()
        assert "shape" in str(caught.value) or "dims" in str(caught.value), caught.value
        assert server.process is not None and server.process.poll() is None
