"""Explicit model control and health checks on a server of this module's own."""

from __future__ import annotations

import re
import subprocess
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.conftest import client_cli, key_file
from tritonrepo.ctr import spec as ctr_spec
from tritonrepo.server.processes import metric_values
from tritonrepo.text import spec
from tritonrepo_client import (
    EmbeddingClient,
    RepositoryClient,
    TritonConnection,
    VersionNotLoaded,
    check_health,
)

pytestmark = pytest.mark.server
CONTROL_SERVER_MODELS = (spec.ENSEMBLE, ctr_spec.RANKING_ENSEMBLE, ctr_spec.SESSION_MODEL)
STEPS = (spec.TOKENIZE_MODEL, spec.ENCODER_MODEL, spec.NORMALIZE_MODEL)


def url(server, protocol: str) -> str:
    return server.options.url(protocol)


def repo_client(server, protocol: str) -> RepositoryClient:
    return RepositoryClient(url(server, protocol), protocol, key=server.options.repository_key)


def cli(server, *args: str, protocol: str = "http") -> subprocess.CompletedProcess:
    key = key_file(server, server.options.log_file.parent)
    return client_cli(
        "--url", url(server, protocol), "--protocol", protocol,
        "--repository-key-file", str(key), *args,
    )  # fmt: skip


def states(repo: RepositoryClient) -> dict[tuple[str, str], str]:
    return {(r.name, r.version): r.state for r in repo.index()}


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_index_lists_models_versions_and_states(control_server, protocol):
    with repo_client(control_server, protocol) as repo:
        rows = states(repo)
        for model in (spec.ENSEMBLE, *STEPS):
            assert rows[(model, "1")] == "READY", rows
        assert (spec.ENCODER_MODEL, "2") not in rows  # staged on disk, not in the policy
        assert repo.versions(spec.ENCODER_MODEL) == [1]
    out = cli(control_server, "models", "list", protocol=protocol)
    assert out.returncode == 0, out.stderr
    assert any(
        line.split()[:3] == [spec.ENCODER_MODEL, "1", "READY"] for line in out.stdout.splitlines()
    ), out.stdout


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_unload_without_and_with_dependents(control_server, protocol):
    with repo_client(control_server, protocol) as repo:
        repo.unload(spec.ENSEMBLE)
        assert not repo.ready(spec.ENSEMBLE)
        assert all(repo.ready(step) for step in STEPS)  # steps keep serving

        repo.load(spec.ENSEMBLE)
        assert repo.ready(spec.ENSEMBLE)

        repo.unload(spec.ENSEMBLE, dependents=True)
        for step in STEPS:
            repo.wait_until(step, [1], timeout_s=30)
        rows = states(repo)
        assert all(rows[(m, "1")] == "UNAVAILABLE" for m in (spec.ENSEMBLE, *STEPS)), rows

        repo.load(spec.ENSEMBLE)  # loading an ensemble loads its steps
        assert all(repo.ready(m) for m in (spec.ENSEMBLE, *STEPS))
    with EmbeddingClient(url(control_server, protocol), protocol) as client:
        assert client.embed(["back again"]).shape == (1, spec.HIDDEN_SIZE)


def test_cli_unload_load_and_ready_exit_codes(control_server):
    assert cli(control_server, "models", "ready", spec.ENSEMBLE).returncode == 0
    out = cli(control_server, "models", "unload", spec.ENSEMBLE, protocol="grpc")
    assert out.returncode == 0, out.stderr
    out = cli(control_server, "models", "ready", spec.ENSEMBLE)
    assert out.returncode == 1 and "NOT READY" in out.stdout
    out = cli(control_server, "models", "load", spec.ENSEMBLE)
    assert out.returncode == 0, out.stderr
    assert (
        cli(control_server, "models", "ready", spec.ENCODER_MODEL, "--version", "1").returncode == 0
    )
    assert (
        cli(control_server, "models", "ready", spec.ENCODER_MODEL, "--version", "2").returncode == 1
    )


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_request_for_a_version_not_loaded_is_explained(control_server, protocol):
    ids = np.array([[101, 7592, 102]], dtype=np.int64)
    inputs = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    with TritonConnection(url(control_server, protocol), protocol) as conn:
        with pytest.raises(
            VersionNotLoaded,
            match=r"version 2 of model 'text_embedding_encoder' is not loaded "
            r"\(loaded versions: 1\)",
        ):
            conn.infer(spec.ENCODER_MODEL, inputs, [spec.ENCODER_OUTPUT], model_version="2")
        out = conn.infer(spec.ENCODER_MODEL, inputs, [spec.ENCODER_OUTPUT], model_version="1")
    assert out[spec.ENCODER_OUTPUT].shape == (1, spec.HIDDEN_SIZE)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_health_passes_with_a_real_inference(control_server, protocol):
    with TritonConnection(url(control_server, protocol), protocol) as conn:
        checks = check_health(conn, control_server.options.models)
    expected = ["live", "ready"]
    for model in control_server.options.models:  # every described pipeline, by name
        expected += [f"{model} ready", f"{model} inference"]
    assert [c.name for c in checks] == expected
    assert all(c.ok for c in checks), checks
    out = cli(control_server, "health", protocol=protocol)
    assert out.returncode == 0 and out.stdout.count("ok  ") == len(expected), out.stdout


def test_health_fails_when_a_step_cannot_serve(control_server):
    """The server stays live, but the ensemble it serves cannot answer (its step unloaded, which
    Triton follows by unloading the ensemble): health of the served models must say so and exit
    non-zero, while the liveness check alone passes. Health's default list is what is loaded:
    an unload asked for is not a failure."""
    with repo_client(control_server, "http") as repo:
        repo.unload(spec.NORMALIZE_MODEL)
        repo.wait_until(spec.NORMALIZE_MODEL, [1], timeout_s=30)
        try:
            out = cli(control_server, "health", "--model", spec.ENSEMBLE)
            assert out.returncode == 1, out.stdout
            assert "FAIL text_embedding" in out.stdout, out.stdout
            assert cli(control_server, "health", "--live").returncode == 0
            out = cli(control_server, "health")
            assert out.returncode == 0 and "text_embedding" not in out.stdout, out.stdout
        finally:
            repo.load(spec.ENSEMBLE)
    out = cli(control_server, "health")
    assert out.returncode == 0 and "ok   text_embedding inference" in out.stdout, out.stdout


# --- custom metrics follow the model's lifetime -----------------------------------------------
CUSTOM_METRICS = ("tritonrepo_step_errors_total", "tritonrepo_sessions_active")


def custom_series(server, model: str) -> dict[str, float]:
    """``{metric{labels}: value}`` of the project's custom metrics labelled ``model``."""
    found = {}
    for name in CUSTOM_METRICS:
        for labels, value in metric_values(server.options.metrics_url, name).items():
            if f'model="{model}"' in labels:
                found[name + labels] = value
    return found


def session_event(server, candidates: list[int], cid: str) -> None:
    """One START+END event to ctr_session over gRPC (raises InferenceServerException)."""
    client = grpcclient.InferenceServerClient(server.options.grpc_url)
    try:
        inputs = []
        for name, array in (("ITEM_ID", [12]), ("CANDIDATES", candidates)):
            tensor = grpcclient.InferInput(name, [len(array)], "INT64")
            tensor.set_data_from_numpy(np.array(array, np.int64))
            inputs.append(tensor)
        client.infer(
            ctr_spec.SESSION_MODEL, inputs, sequence_id=cid, sequence_start=True, sequence_end=True
        )
    finally:
        client.close()


def without_pid(series: str) -> str:
    """A series' name and labels without ``stub_pid`` (each stub process has its own)."""
    return re.sub(r'stub_pid="\d+",?', "", series)


def wait_for_series(server, model: str, count: int, deadline_s: float = 30) -> dict[str, float]:
    """``model``'s custom series once there are ``count`` of them (polled, with a deadline)."""
    deadline = time.monotonic() + deadline_s
    while len(series := custom_series(server, model)) != count:
        assert time.monotonic() < deadline, f"{model}: {len(series)} series, not {count}: {series}"
        time.sleep(0.2)
    return series


def test_unload_removes_a_models_custom_metric_series_and_load_starts_them_at_zero(
    control_server,
):
    """ctr_session's 8 series (2 instances x 3 error kinds + 1 sessions gauge) leave
    /metrics with `models unload` and come back at 0 with `models load`; the same metric of
    other models (one family name for all steps) is untouched."""
    model = ctr_spec.SESSION_MODEL
    session_event(control_server, [5, 66, 981], "metrics-good")
    with pytest.raises(InferenceServerException, match="CANDIDATES must hold 1 to 512"):
        session_event(control_server, list(range(1, 514)), "metrics-bad")
    served = wait_for_series(control_server, model, 8)
    over_limit = [v for k, v in served.items() if 'kind="over_limit"' in k]
    assert sorted(over_limit) == [0.0, 1.0], served  # one instance answered the error
    others = custom_series(control_server, ctr_spec.PREPROCESS_MODEL)
    assert others, "ctr_preprocess has no error counters"

    out = cli(control_server, "models", "unload", model)
    assert out.returncode == 0, out.stderr
    with repo_client(control_server, "http") as repo:
        repo.wait_until(model, [1], timeout_s=60)
    assert wait_for_series(control_server, model, 0) == {}
    assert custom_series(control_server, ctr_spec.PREPROCESS_MODEL) == others

    out = cli(control_server, "models", "load", model)
    assert out.returncode == 0, out.stderr
    again = wait_for_series(control_server, model, 8)
    assert {without_pid(k) for k in again} == {without_pid(k) for k in served}
    assert not set(again) & set(served), "the new stubs count in series of their own"
    assert all(value == 0 for value in again.values()), again
    session_event(control_server, [5, 66], "metrics-after")  # and it serves
