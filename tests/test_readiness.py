"""Issue 10: readiness means "can serve". `tritonrepo-client health` judges the models this
deployment serves (each READY and answering a probe inference), not Triton's server readiness,
which ``--strict-readiness=true`` (Triton's default, the container's) turns false when any
unrelated model fails to load. The module's server runs strict on purpose, like the container.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import client_cli, key_file, require_artifacts, server_options
from tritonrepo.ctr import spec as ctr_spec
from tritonrepo.launcher import TritonServer
from tritonrepo.text import spec
from tritonrepo_client import EmbeddingClient, RankingClient, RepositoryClient, TritonConnection
from tritonrepo_client.connection import ClientError
from tritonrepo_client.health import DEFAULT_MODELS

pytestmark = pytest.mark.server
BROKEN = "broken_initialize"
BROKEN_CONFIG = {
    "name": BROKEN,
    "backend": "python",
    "max_batch_size": 0,
    "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [1]}],
    "output": [{"name": "Y", "data_type": "TYPE_FP32", "dims": [1]}],
}
BROKEN_MODEL_PY = b"""
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("initialize fails on purpose (test_readiness)")
"""


@pytest.fixture(scope="module")
def strict_server() -> Iterator[TritonServer]:
    """The three served models on a server with Triton's strict readiness (the container's)."""
    require_artifacts()
    options = server_options("test_readiness", extra_args=("--strict-readiness=true",))
    with TritonServer(options) as server:
        yield server


def cli(server: TritonServer, *args: str) -> subprocess.CompletedProcess:
    key = key_file(server, Path(server.options.log_file).parent)
    return client_cli("--url", server.options.http_url, "--repository-key-file", str(key), *args)


def repo_client(server: TritonServer) -> RepositoryClient:
    return RepositoryClient(server.options.http_url, key=server.options.repository_key)


def test_the_launcher_does_not_use_strict_readiness():
    command = TritonServer(server_options()).command(Path("/backends"))
    assert "--strict-readiness=false" in command
    assert "--strict-readiness=true" not in command


def test_an_unrelated_failed_load_does_not_flip_readiness(strict_server):
    """A new Python model whose initialize raises, loaded with a config and file override:
    the load fails and Triton's strict readiness turns false, but `health` probes every
    ensemble and exits 0, and the ensembles serve."""
    with (
        repo_client(strict_server) as repo,
        pytest.raises(ClientError, match="initialize fails on purpose"),
    ):
        repo.load(BROKEN, BROKEN_CONFIG, {"file:1/model.py": BROKEN_MODEL_PY})
    with TritonConnection(strict_server.options.http_url) as conn:
        assert not conn.server_ready(), "Triton's strict readiness should have turned false"
    out = cli(strict_server, "health")
    assert out.returncode == 0, out.stdout + out.stderr
    for model in DEFAULT_MODELS:
        assert f"ok   {model} inference:" in out.stdout, out.stdout
    assert "ok   ready: all 4 served models READY and answering" in out.stdout, out.stdout
    with EmbeddingClient(strict_server.options.http_url) as client:
        assert client.embed(["still serving"]).shape == (1, spec.HIDDEN_SIZE)
    with RankingClient(strict_server.options.http_url) as client:
        assert len(client.rank([1, 2], [3, 4, 5], 2).item_ids) == 2


def test_health_reports_every_failing_model_and_exits_1(strict_server):
    """A step unloaded: its ensemble's probe fails and is named, exit 1; the other models are
    still checked and pass; `health --live` passes."""
    with repo_client(strict_server) as repo:
        repo.unload(ctr_spec.POSTPROCESS_MODEL)
        repo.wait_until(ctr_spec.POSTPROCESS_MODEL, [1], timeout_s=30)
        try:
            out = cli(strict_server, "health")
            assert out.returncode == 1, out.stdout
            assert f"FAIL ready: cannot serve: {ctr_spec.RANKING_ENSEMBLE}\n" in out.stdout
            # The ensemble is not READY without its step, or READY with a failing probe.
            assert f"FAIL {ctr_spec.RANKING_ENSEMBLE} " in out.stdout, out.stdout
            assert f"ok   {spec.ENSEMBLE} inference:" in out.stdout
            assert f"ok   {ctr_spec.SESSION_MODEL} inference:" in out.stdout
            assert cli(strict_server, "health", "--live").returncode == 0
        finally:
            repo.load(ctr_spec.RANKING_ENSEMBLE)
    assert cli(strict_server, "health").returncode == 0
