"""Version 2 of a described pipeline's core, built from its description by the tools
(``python -m builders.pipeline.build breast_cancer --version 2``, what ``make version`` runs)
and rolled out on a real server under load.

``breast_cancer``'s ``build(version)`` refits its logistic regression with ``C = 1 / version``:
version 2 is a retrained model whose probabilities differ from version 1's by up to 0.07 on the
held-out rows. On CPU the pipeline is one Python model that runs its core's file of its own
version, so the rollout moves ``breast_cancer`` from version 1 to 2; the answers before and
after are compared with scikit-learn's own ``predict_proba`` of each fitted version (the
reference), and every live request sent during the rollout must succeed.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import numpy as np

from tests.conftest import require_artifacts, server_options
from tests.server.pipeline_copies import build_version, copy_pipeline
from tritonrepo.paths import REPO_ROOT
from tritonrepo.server.launcher import TritonServer
from tritonrepo_client import PipelineClient, RepositoryClient
from tritonrepo_client.control.rollout import TensorCanary, rollout

PIPELINE = "breast_cancer"
CORE = "breast_cancer_model"
ROWS = 32  # held-out rows compared before and after


def held_out() -> tuple[np.ndarray, dict[int, np.ndarray]]:
    """``(measurements FP32 [ROWS, 30], {version: P(malignant) FP32 [ROWS]})`` from
    scikit-learn's fitted estimators (the reference implementation)."""
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    from pipelines.breast_cancer.model import fit, split
    from pipelines.breast_cancer.steps import preprocess

    x_test = split()[1][:ROWS]
    features = preprocess({"MEASUREMENTS": x_test})["features"]
    return x_test, {v: fit(v).predict_proba(features)[:, 0] for v in (1, 2)}


def served(client: PipelineClient, rows: np.ndarray) -> np.ndarray:
    return np.asarray(client.infer({"MEASUREMENTS": rows})["PROBABILITY_MALIGNANT"]).reshape(-1)


def test_version_2_built_from_the_description_rolls_out_under_load(tmp_path: Path) -> None:
    require_artifacts()
    repo = copy_pipeline(f"{PIPELINE}*", tmp_path)  # the pipeline's generated models
    build = build_version(PIPELINE, 2, repo)
    assert build.returncode == 0, build.stderr
    assert f"{PIPELINE}: {CORE} version 2 built in " in build.stdout, build.stdout
    assert (repo / PIPELINE / "2" / "model.py").is_file()
    again = build_version(PIPELINE, 1, repo)
    assert again.returncode == 1 and "version 1 is served" in again.stderr, again.stderr

    rows, reference = held_out()
    assert np.abs(reference[1] - reference[2]).max() > 0.01  # the versions differ
    options = server_options("pipeline-versions", models=(PIPELINE,), model_repository=repo)
    with TritonServer(options):
        url = options.http_url
        with PipelineClient(PIPELINE, url, "http") as client:
            np.testing.assert_allclose(served(client, rows), reference[1], atol=1e-5)
        failures: list[str] = []
        answered = [0]
        done = threading.Event()

        def live() -> None:
            with PipelineClient(PIPELINE, url, "http") as live_client:
                while not done.is_set():
                    try:
                        got = served(live_client, rows[:4])
                    except Exception as exc:
                        failures.append(repr(exc))
                        continue
                    if not any(np.allclose(got, reference[v][:4], atol=1e-5) for v in (1, 2)):
                        failures.append(f"neither version's answer: {got}")
                    answered[0] += 1

        threads = [threading.Thread(target=live) for _ in range(3)]
        for thread in threads:
            thread.start()
        try:
            with RepositoryClient(url, "http", key=options.repository_key) as repo_client:
                canary = TensorCanary({"MEASUREMENTS": rows}, ["PROBABILITY_MALIGNANT"],
                                      atol=0.1, rtol=0.0)  # fmt: skip
                report = rollout(repo_client, PIPELINE, 2, canary=canary)
                serving = repo_client.versions(PIPELINE)
        finally:
            done.set()
            for thread in threads:
                thread.join()
        print(report, f"live requests answered: {answered[0]}")
        assert serving == [2]
        assert not failures, failures[:3]
        assert answered[0] > 20, answered
        with PipelineClient(PIPELINE, url, "http") as client:
            np.testing.assert_allclose(served(client, rows), reference[2], atol=1e-5)
