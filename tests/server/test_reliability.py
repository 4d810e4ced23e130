"""Reliability cases on the real server: deadlines on model control, override and correlation-ID
checks before sending, per-request errors in the server log, and shared memory left behind.
(Dead steps and readiness: test_self_healing.py, test_readiness.py; limits: test_limits.py.)"""

from __future__ import annotations

import http.client
import json
import os
import secrets
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import client_cli, key_file, require_artifacts, server_options
from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.server.launcher import TritonServer
from tritonrepo.text import spec
from tritonrepo_client import EmbeddingClient, RepositoryClient, SessionClient, TritonConnection
from tritonrepo_client.control.repository import ControlTimeout
from tritonrepo_client.validation import (
    MAX_GRPC_CORRELATION_ID,
    MAX_NUMERIC_CORRELATION_ID,
    InvalidCorrelationId,
    InvalidOverride,
)

pytestmark = pytest.mark.server
STUCK = "stuck_python"  # a Python model whose version folder has a config but no model.py
TEXT_MODELS = (spec.ENSEMBLE, spec.TOKENIZE_MODEL, spec.ENCODER_MODEL, spec.NORMALIZE_MODEL)


@pytest.fixture(scope="module")
def text_server(tmp_path_factory) -> Iterator[TritonServer]:
    """text_embedding on a repository of its own: the real models (symlinked) plus STUCK."""
    require_artifacts()
    repo = tmp_path_factory.mktemp("repository")
    for model in TEXT_MODELS:
        (repo / model).symlink_to(MODEL_REPOSITORY / model, target_is_directory=True)
    (repo / STUCK / "1").mkdir(parents=True)
    (repo / STUCK / "config.pbtxt").write_text(
        f'name: "{STUCK}"\nbackend: "python"\nmax_batch_size: 0\n'
        'input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
    )
    options = server_options("test_reliability", model_repository=repo, models=(spec.ENSEMBLE,))
    with TritonServer(options) as server:
        yield server


def cli(server: TritonServer, *args: str) -> object:
    key = key_file(server, server.options.log_file.parent)
    return client_cli(
        "--url", server.options.http_url, "--repository-key-file", str(key), *args, timeout=120
    )


def embed_ok(server: TritonServer) -> None:
    with EmbeddingClient(server.options.http_url) as client:
        vector = client.embed(["still serving"])
    assert vector.shape == (1, 384)
    assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-3


# --- case 3: a load that never returns -----------------------------------------------------------
def test_load_that_never_finishes_is_abandoned_at_its_deadline_with_the_state(text_server):
    start = time.monotonic()
    out = cli(text_server, "--timeout", "4", "models", "load", STUCK)
    elapsed = time.monotonic() - start
    assert out.returncode == 1, out.stdout
    assert "did not finish within 4 s" in out.stderr, out.stderr
    assert f"{STUCK} version 1: LOADING" in out.stderr, out.stderr
    assert "server restart" in out.stderr
    assert elapsed < 60, f"the 4 s deadline was not honoured ({elapsed:.0f} s)"
    embed_ok(text_server)  # the ensemble is untouched
    with (
        RepositoryClient(
            text_server.options.http_url, key=text_server.options.repository_key, timeout_s=3
        ) as repo,
        pytest.raises(ControlTimeout, match="LOADING"),
    ):
        repo.unload(STUCK)


def test_override_files_without_model_py_are_refused_before_sending(text_server):
    config = {
        "name": "no_model_py",
        "backend": "python",
        "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [1]}],
        "output": [{"name": "Y", "data_type": "TYPE_FP32", "dims": [1]}],
    }
    with RepositoryClient(
        text_server.options.http_url, key=text_server.options.repository_key
    ) as repo:
        with pytest.raises(InvalidOverride, match=r"version\(s\) 1 have no model.py"):
            repo.load("no_model_py", config, {"file:1/notes.txt": b"no code"})
        assert "no_model_py" not in {row.name for row in repo.index()}  # nothing was sent


# --- case 6: unclear override errors -----------------------------------------------------------
def test_override_in_the_wrong_schema_names_the_file_and_field(text_server, tmp_path):
    with RepositoryClient(text_server.options.http_url, key="") as repo:
        config = repo.config(spec.NORMALIZE_MODEL)
    config["input"][0]["data_type"] = config["input"][0]["data_type"].removeprefix("TYPE_")
    path = tmp_path / "pool.json"
    path.write_text(json.dumps(config))
    out = cli(text_server, "models", "load", spec.NORMALIZE_MODEL, "--config", str(path))
    assert out.returncode == 1
    assert str(path) in out.stderr, out.stderr
    assert "ModelConfig.input[0].data_type" in out.stderr, out.stderr
    assert "failed to poll" not in out.stderr


def test_override_that_is_not_json_names_the_file_and_position(text_server, tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"name": "text_embedding_normalize",\n  max_batch_size: 64}')
    out = cli(text_server, "models", "load", spec.NORMALIZE_MODEL, "--config", str(path))
    assert out.returncode == 1
    assert f"{path}: not JSON" in out.stderr, out.stderr
    assert "line 2 column 3" in out.stderr, out.stderr


def test_a_valid_override_still_loads(text_server, tmp_path):
    with RepositoryClient(text_server.options.http_url, key="") as repo:
        config = repo.config(spec.NORMALIZE_MODEL)
    path = tmp_path / "pool.json"
    path.write_text(json.dumps(config))
    out = cli(text_server, "models", "load", spec.NORMALIZE_MODEL, "--config", str(path))
    assert out.returncode == 0, out.stderr
    embed_ok(text_server)


# --- case 7: correlation IDs -----------------------------------------------------------------
EVENTS = '{"item_id": 5, "candidates": [11, 222]}\n'


@pytest.mark.parametrize(
    ("correlation_id", "message"),
    [
        (str(MAX_NUMERIC_CORRELATION_ID + 1), "out of range"),
        ("0", "out of range"),
        ("s" * 129, "129 bytes"),
        ("é" * 65, "130 bytes"),
    ],
)
def test_cli_refuses_correlation_ids_triton_cannot_take(triton_server, correlation_id, message):
    out = client_cli(
        "--url", triton_server.options.http_url, "session", "--correlation-id", correlation_id,
        stdin=EVENTS,
    )  # fmt: skip
    assert out.returncode == 1
    assert "--correlation-id" in out.stderr and message in out.stderr, out.stderr
    assert "Unable to parse" not in out.stderr and "UNIMPLEMENTED" not in out.stderr


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_correlation_ids_at_the_limits_are_served(triton_server, protocol):
    top = MAX_NUMERIC_CORRELATION_ID if protocol == "http" else MAX_GRPC_CORRELATION_ID
    with SessionClient(triton_server.options.url(protocol), protocol) as client:
        for correlation_id in (
            top - secrets.randbelow(1000),
            "s" * 127 + secrets.choice("abcdef"),
        ):
            ranking = client.session(correlation_id).send(5, [11, 222], end=True)
            assert sorted(ranking.item_ids.tolist()) == [11, 222]
        for bad in (top + 1, -1, 0, "", "x" * 129, True):
            with pytest.raises(InvalidCorrelationId):
                client.session(bad)


def test_triton_itself_refuses_a_129_byte_string_id(triton_server):
    """Why the limit is 128: Triton 2.51 refuses longer string IDs (not our check)."""
    client = grpcclient.InferenceServerClient(triton_server.options.grpc_url)
    inputs = [
        grpcclient.InferInput("ITEM_ID", [1], "INT64"),
        grpcclient.InferInput("CANDIDATES", [2], "INT64"),
    ]
    inputs[0].set_data_from_numpy(np.array([5], dtype=np.int64))
    inputs[1].set_data_from_numpy(np.array([11, 222], dtype=np.int64))
    with pytest.raises(InferenceServerException):
        client.infer(
            "ctr_session", inputs, sequence_id="x" * 129, sequence_start=True, sequence_end=True
        )
    client.close()


# --- case 5: per-request errors reach the server log -------------------------------------------
def test_a_request_error_is_logged_with_model_and_request_id(triton_server):
    request_id = f"bad-utf8-{secrets.token_hex(4)}"
    client = httpclient.InferenceServerClient(triton_server.options.http_url)
    text = httpclient.InferInput("TEXT", [1, 1], "BYTES")
    text.set_data_from_numpy(np.array([[b"\xff\xfe not utf-8"]], dtype=object))
    with pytest.raises(InferenceServerException, match="UTF-8"):
        client.infer(spec.ENSEMBLE, [text], request_id=request_id)
    client.close()
    log = Path(triton_server.options.log_file)
    deadline = time.monotonic() + 10
    lines: list[str] = []
    while time.monotonic() < deadline and not lines:
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if request_id in ln]
        time.sleep(0.2)
    assert lines, f"no line with request id {request_id} in {log}"
    assert f"model={spec.TOKENIZE_MODEL}" in lines[0] and "UTF-8" in lines[0], lines[0]


# --- case 8: shared memory of a killed stub ----------------------------------------------------
def test_stop_removes_this_servers_regions_and_no_other(triton_server, tmp_path):
    others = set(triton_server.shared_memory_regions())
    assert others, "the shared server's stubs have regions"
    options = server_options("test_reliability_shm", models=(spec.ENSEMBLE,))
    server = TritonServer(options).start()
    try:
        embed_ok(server)
        stubs = {s.instance: s for s in server.stub_processes()}
        killed = stubs[f"{spec.TOKENIZE_MODEL}_0_0"]
        os.kill(killed.pid, signal.SIGKILL)
        assert (Path("/dev/shm") / killed.region).exists()
        own = server.shared_memory_regions()
        assert len(own) == len(stubs)
    finally:
        server.stop()
    assert not server.shared_memory_regions()
    assert not (Path("/dev/shm") / killed.region).exists()
    assert set(triton_server.shared_memory_regions()) == others
    with TritonConnection(triton_server.options.http_url) as conn:
        assert conn.model_ready(spec.ENSEMBLE)


# --- found by fuzzing: a Triton 2.51 crash that no model can prevent ----------------------------
def test_triton_2_51_aborts_on_a_huge_json_shape():
    """A JSON request whose declared shape is huge ([2**32 + 1, 2] INT64 = 68 GB) makes Triton
    2.51's HTTP frontend allocate it before reading the data: std::bad_alloc, and the whole
    server aborts (fixed upstream by server PR #8676, 2026: sizes checked before allocating).
    The request is 200 bytes, so a body-size limit does not stop it; see README, Reliability.
    When an upgraded Triton refuses it instead, this test fails: update the README then."""
    require_artifacts()
    server = TritonServer(server_options("test_reliability_json", models=("ctr_ranking",)))
    server.start()
    try:
        body = {
            "inputs": [
                {"name": "HISTORY", "datatype": "INT64", "shape": [2**32 + 1, 2], "data": []},
                {"name": "CANDIDATES", "datatype": "INT64", "shape": [1], "data": [1]},
            ]
        }
        conn = http.client.HTTPConnection("127.0.0.1", server.options.http_port, timeout=60)
        with pytest.raises((ConnectionError, http.client.HTTPException)):
            conn.request("POST", "/v2/models/ctr_ranking/infer", body=json.dumps(body))
            conn.getresponse().read()
        conn.close()
        assert server.process is not None
        assert server.process.wait(timeout=60) != 0, "the server survived: Triton was fixed"
        log = Path(server.options.log_file).read_text(errors="replace")
        assert "std::bad_alloc" in log
    finally:
        server.stop()
