"""The FastAPI baseline of ``make bench-pipelines`` (benchmarks/pipelines/fastapi_service.py)
answers what
the pipeline answers: under a real gunicorn with two uvicorn workers, every sample row in its own
request and all rows in one request equal the description's functions and built model called in
this process (tests.pipeline_suite.in_process); a value the preprocess function refuses gets
HTTP 400 with its message, and the service keeps answering."""

from __future__ import annotations

import http.client
import json
from typing import Any

import numpy as np
import pytest

from benchmarks.pipelines.fastapi_service import (
    PipelineFastApi,
    answer_arrays,
    describe,
    model_file,
    request_json,
)
from tests.pipeline_suite import assert_same, bad_value, in_process
from tritonrepo.description import import_ref
from tritonrepo.paths import BUILD_DIR
from tritonrepo.server.launcher import free_port

PIPELINES = ["breast_cancer", "click_lightgbm", "nudenet_detector"]


def post(port: int, path: str, body: dict[str, Any]) -> tuple[int, Any]:
    """(HTTP status, JSON answer) of one POST to 127.0.0.1:``port``."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        answer = connection.getresponse()
        return answer.status, json.loads(answer.read())
    finally:
        connection.close()


@pytest.mark.parametrize("name", PIPELINES)
def test_fastapi_baseline_answers_as_in_process_and_refuses_a_bad_value(name: str) -> None:
    pipeline = describe(name)
    if not model_file(pipeline).is_file():
        pytest.fail(f"{model_file(pipeline)} is missing: run `make artifacts`")
    samples = {k: np.asarray(v) for k, v in import_ref(pipeline.samples)().items()}
    want = in_process(pipeline, samples)
    rows = len(next(iter(samples.values())))
    log = BUILD_DIR / "test-logs" / f"fastapi-{name}.log"
    with PipelineFastApi(name, free_port(), 2, log) as service:
        path = f"/{name}"
        for i in range(rows):
            row = {k: v[i : i + 1] for k, v in samples.items()}
            status, answer = post(service.port, path, request_json(row, pipeline))
            assert status == 200, answer
            want_row = {k: np.asarray(v)[i : i + 1] for k, v in want.items()}
            assert_same(answer_arrays(answer, pipeline), want_row, f"{name} row {i}")
        status, answer = post(service.port, path, request_json(samples, pipeline))
        assert status == 200, answer
        assert_same(answer_arrays(answer, pipeline), want, f"{name} all rows")

        with pytest.raises(ValueError) as refused:
            in_process(pipeline, bad_value(pipeline, samples))
        status, answer = post(
            service.port, path, request_json(bad_value(pipeline, samples), pipeline)
        )
        assert status == 400 and answer["detail"] == str(refused.value), answer
        status, answer = post(service.port, path, request_json(samples, pipeline))
        assert status == 200, answer
        assert_same(answer_arrays(answer, pipeline), want, f"{name} after the refusal")
