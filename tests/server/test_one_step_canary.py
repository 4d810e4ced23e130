"""The canary of a described single-core pipeline served on CPU as one Python model
(``breast_cancer``: preprocess -> StandardScaler + LogisticRegression -> postprocess in one
execute), on a real server behind its HTTP guard, under load from client threads that count
every failed request.

Version 2 is built by the tools from the description (``python -m builders.pipeline.build
breast_cancer --version 2``: ``build(version)`` refits with ``C = 1 / version``); two wrong
versions are made here the way a team could get them wrong: version 3 answers a constant (the
fitted model with its coefficients and intercept zeroed: 0.5 for every row) and version 4 is
trained on shuffled labels. The canary copies the pipeline's model as ``breast_cancer__canary``
running as the new version (``tritonrepo_as_version``) and compares every output of the shadow
copies by the default measures (no ``[canary]`` in the description): the wrong versions are
rolled back, the retrained one promoted, and no live request fails in any of them. Answers
after each are checked against scikit-learn's ``predict_proba`` of the version that serves.
"""

from __future__ import annotations

import shutil
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import require_artifacts, server_options
from tests.server.pipeline_copies import build_version, copy_pipeline
from tests.server.test_pipeline_versions import CORE, PIPELINE, held_out, served
from tritonrepo.paths import REPO_ROOT
from tritonrepo.server.http_guard import guard_available
from tritonrepo.server.launcher import TritonServer
from tritonrepo_client import PipelineClient, RepositoryClient
from tritonrepo_client.control.canary import canary_rollout
from tritonrepo_client.control.canary_forms import CANARY_SUFFIX
from tritonrepo_client.control.canary_policy import CanaryPolicy
from tritonrepo_client.control.guard_routes import GuardRoutes

pytestmark = pytest.mark.server
RETRAINED, CONSTANT, SHUFFLED = 2, 3, 4
POLICY = CanaryPolicy(
    steps=(10.0, 50.0), shadow=20.0, window_s=5.0, interval_s=1.0, min_requests=20,
    max_p99_ratio=4.0,
)  # fmt: skip
LOAD_THREADS = 3
ROWS_PER_REQUEST = 4


def wrong_version(repo: Path, version: int) -> None:
    """Write ``version`` of the core (constant or shuffled-label, module docstring) and the
    one-step model's version folder, as ``make version`` lays them out."""
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    from skl2onnx import to_onnx
    from skl2onnx.common.data_types import FloatTensorType
    from sklearn.base import clone
    from sklearn.linear_model import LogisticRegression

    from pipelines.breast_cancer.model import fit, split
    from pipelines.breast_cancer.steps import preprocess

    x_train, _, y_train, _ = split()
    features = preprocess({"MEASUREMENTS": x_train})["features"]
    if version == CONSTANT:
        clf = clone(fit(1)).fit(features, y_train)
        clf[-1].coef_[:] = 0.0
        clf[-1].intercept_[:] = 0.0
    else:
        labels = np.random.default_rng(0).permutation(y_train)
        clf = clone(fit(1)).fit(features, labels)
    types = [("features", FloatTensorType([None, features.shape[1]]))]
    model = to_onnx(clf, initial_types=types, options={LogisticRegression: {"zipmap": False}})
    (repo / CORE / str(version)).mkdir()
    (repo / CORE / str(version) / "model.onnx").write_bytes(model.SerializeToString())
    (repo / PIPELINE / str(version)).mkdir()
    shutil.copyfile(repo / PIPELINE / "1" / "model.py", repo / PIPELINE / str(version) / "model.py")


@pytest.fixture(scope="module")
def repository(tmp_path_factory) -> Path:
    """The pipeline's generated models copied, version 2 built by the tools, versions 3 and
    4 written here."""
    require_artifacts()
    repo = copy_pipeline(f"{PIPELINE}*", tmp_path_factory.mktemp("one_step_canary"))
    build = build_version(PIPELINE, RETRAINED, repo)
    assert build.returncode == 0, build.stderr
    for version in (CONSTANT, SHUFFLED):
        wrong_version(repo, version)
    return repo


@pytest.fixture(scope="module")
def server(repository: Path) -> Iterator[TritonServer]:
    reason = guard_available()
    if reason:
        pytest.fail(reason)
    options = server_options("one_step_canary", models=(PIPELINE,), http_guard=True,
                             model_repository=repository)  # fmt: skip
    with TritonServer(options) as s:
        yield s


@pytest.fixture(scope="module")
def reference() -> tuple[np.ndarray, dict[int, np.ndarray]]:
    return held_out()


class Load:
    """``LOAD_THREADS`` clients sending ``ROWS_PER_REQUEST`` of the held-out rows per request
    (each request the next ones) through the guard until stopped; ``counts`` has ``ok`` and
    each failure's text."""

    def __init__(self, url: str, rows: np.ndarray) -> None:
        self.url, self.rows = url, rows
        self.counts: Counter[str] = Counter()
        self.done = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(i,)) for i in range(LOAD_THREADS)]

    def _run(self, offset: int) -> None:
        chunks = len(self.rows) // ROWS_PER_REQUEST
        with PipelineClient(PIPELINE, self.url, "http") as client:
            while not self.done.is_set():
                start = (offset % chunks) * ROWS_PER_REQUEST
                offset += 1
                try:
                    served(client, self.rows[start : start + ROWS_PER_REQUEST])
                    self.counts["ok"] += 1
                except Exception as exc:
                    self.counts[repr(exc)[:200]] += 1

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        for thread in self.threads:
            thread.join(timeout=60)


def run_canary(server: TritonServer, version: int, rows: np.ndarray):
    """The canary of ``version`` under :class:`Load`: (report, serving versions, ready models,
    routes left, load counts)."""
    o = server.options
    with (
        RepositoryClient(o.http_url, "http", key=o.repository_key) as repo,
        Load(o.http_url, rows) as load,
    ):
        assert repo.versions(PIPELINE) == [1]
        routes = GuardRoutes(o.http_url, repo.headers)
        report = canary_rollout(repo, routes, f"127.0.0.1:{o.metrics_port}", PIPELINE, CORE,
                                version, POLICY)  # fmt: skip
        serving = repo.versions(PIPELINE)
        loaded = {r.name for r in repo.index() if r.state == "READY"}
        left = routes.routes()
    print(f"load: {dict(load.counts)}")
    return report, serving, loaded, left, load.counts


@pytest.mark.parametrize("version", [CONSTANT, SHUFFLED], ids=["constant", "shuffled_labels"])
def test_a_wrong_version_is_rolled_back_on_its_answers(server, reference, version):
    rows, expected = reference
    report, serving, loaded, left, counts = run_canary(server, version, rows)
    assert report.decision == "rollback", report
    assert "answers differ" in report.reason, report.reason
    assert set(report.compared) >= {"DIAGNOSIS:exact", "PROBABILITY_MALIGNANT:decision"}
    assert set(counts) == {"ok"} and counts["ok"] > 50, counts
    assert serving == [1] and PIPELINE + CANARY_SUFFIX not in loaded and left == {}
    with PipelineClient(PIPELINE, server.options.http_url, "http") as client:
        np.testing.assert_allclose(served(client, rows), expected[1], atol=1e-5)


def test_a_retrained_version_built_by_the_tools_is_promoted(server, reference):
    """Runs after the rollbacks (the file's order): it leaves version 2 serving."""
    rows, expected = reference
    report, serving, loaded, left, counts = run_canary(server, RETRAINED, rows)
    assert report.decision == "promote", report
    assert any("window at 50 %" in line for line in report.lines), report.lines
    assert set(counts) == {"ok"} and counts["ok"] > 50, counts
    assert serving == [RETRAINED] and PIPELINE + CANARY_SUFFIX not in loaded and left == {}
    with PipelineClient(PIPELINE, server.options.http_url, "http") as client:
        np.testing.assert_allclose(served(client, rows), expected[RETRAINED], atol=1e-5)
