"""Version 2 of a stateful described pipeline's core rolled out while sessions are open
(``digit_stream``: a session model keeps each session's rows and calls its core,
``digit_stream_model``, through BLS).

Version 2 is built by the tools (``python -m builders.pipeline.build digit_stream --version 2``:
``build(version)`` refits with ``C = 0.05 / version``). Twelve sessions send their first four
rows on version 1; the core is rolled out to version 2 with ``tritonrepo-client``'s rollout
while other sessions stream from start to end; then the twelve send their last four rows
without starting again. Their state survived (``ROWS_SEEN`` goes on from 5), and every answer
equals scikit-learn's own classifier of the version that served it (the reference: the
pipeline's ``fit(version)``'s ``predict_proba`` on the rows seen so far). No request fails.
The canary is refused for a stateful pipeline, with the reason and this rollout named.
"""

from __future__ import annotations

import sys
import threading
from collections import Counter
from collections.abc import Iterator

import numpy as np
import pytest

from tests.conftest import require_artifacts, server_options
from tests.server.pipeline_copies import build_version, copy_pipeline
from tritonrepo.paths import REPO_ROOT
from tritonrepo.server.launcher import TritonServer
from tritonrepo_client import RepositoryClient, TritonConnection
from tritonrepo_client.control.canary_forms import CanaryError, canary_form
from tritonrepo_client.control.rollout import TensorCanary, rollout

pytestmark = pytest.mark.server
PIPELINE, CORE = "digit_stream", "digit_stream_model"
OUTPUTS = ["DIGIT", "PROBABILITIES", "ROWS_SEEN"]
TOL = 1e-5  # ONNX Runtime's logistic regression in FP32, scikit-learn in FP64
OPEN_SESSIONS = 12
ROWS_BEFORE = 4  # rows each open session sends on version 1


def reference() -> tuple[np.ndarray, dict[int, object]]:
    """Held-out images FP32 ``[n, 8, 8]`` and ``{version: fitted scikit-learn classifier}``."""
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    from pipelines.digit_stream.model import fit, split

    return split()[1], {v: fit(v) for v in (1, 2)}


def seen_so_far(image: np.ndarray, rows: int) -> np.ndarray:
    """FP64 ``[1, 64]``: the top ``rows`` rows of ``image``, the rest 0 (white)."""
    partial = np.zeros((8, 8))
    partial[:rows] = image[:rows]
    return partial.reshape(1, 64)


def versions_matching(answer: dict, image: np.ndarray, rows: int, fitted: dict) -> list[int]:
    """The versions whose classifier gives ``answer``'s probabilities for the rows seen."""
    x = seen_so_far(image, rows)
    got = answer["PROBABILITIES"]
    return [v for v, clf in fitted.items() if np.abs(got - clf.predict_proba(x)).max() <= TOL]


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[TritonServer]:
    require_artifacts()
    repo = copy_pipeline(f"{PIPELINE}*", tmp_path_factory.mktemp("stateful_rollout"))
    build = build_version(PIPELINE, 2, repo)
    assert build.returncode == 0, build.stderr
    options = server_options("stateful_rollout", models=(PIPELINE,), model_repository=repo)
    with TritonServer(options) as s:
        yield s


def test_a_rollout_of_the_core_keeps_open_sessions_and_their_state(server):
    images, fitted = reference()
    url = server.options.http_url
    opened = images[:OPEN_SESSIONS]
    with TritonConnection(url, "http") as conn:
        for row in range(ROWS_BEFORE):
            for i, image in enumerate(opened):
                answer = conn.infer(PIPELINE, {"ROW": image[row : row + 1]}, OUTPUTS,
                                    sequence_id=f"open-{i}", sequence_start=row == 0)  # fmt: skip
                assert versions_matching(answer, image, row + 1, fitted) == [1], (i, row)

    counts: Counter[str] = Counter()
    done = threading.Event()

    def stream(thread: int) -> None:
        """Whole sessions, start to end, until the rollout is over."""
        n = 0
        with TritonConnection(url, "http") as live:
            while not done.is_set():
                image = images[OPEN_SESSIONS + n % (len(images) - OPEN_SESSIONS)]
                for row in range(8):
                    try:
                        answer = live.infer(
                            PIPELINE, {"ROW": image[row : row + 1]}, OUTPUTS,
                            sequence_id=f"live-{thread}-{n}", sequence_start=row == 0,
                            sequence_end=row == 7,
                        )  # fmt: skip
                    except Exception as exc:
                        counts[repr(exc)[:200]] += 1
                        break
                    ok = answer["ROWS_SEEN"][0, 0] == row + 1 and versions_matching(
                        answer, image, row + 1, fitted
                    )
                    counts["ok" if ok else f"wrong answer at row {row}"] += 1
                n += 1

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    try:
        with RepositoryClient(url, "http", key=server.options.repository_key) as repo:
            with pytest.raises(CanaryError, match=r"stateful.*Roll out its core"):
                canary_form(repo, PIPELINE, CORE, 2)
            probe = {"pixels": np.stack([seen_so_far(im, 8)[0] for im in opened]).astype("f4")}
            report = rollout(repo, CORE, 2, canary=TensorCanary(probe, ["probabilities"],
                                                                atol=0.5, rtol=0.0))  # fmt: skip
            serving = repo.versions(CORE)
    finally:
        done.set()
        for thread in threads:
            thread.join(timeout=60)
    print(report, f"live events: {dict(counts)}")
    assert serving == [2]
    assert set(counts) == {"ok"} and counts["ok"] > 50, counts

    with TritonConnection(url, "http") as conn:
        for row in range(ROWS_BEFORE, 8):
            for i, image in enumerate(opened):
                answer = conn.infer(PIPELINE, {"ROW": image[row : row + 1]}, OUTPUTS,
                                    sequence_id=f"open-{i}", sequence_end=row == 7)  # fmt: skip
                assert answer["ROWS_SEEN"][0, 0] == row + 1, (i, row)  # the state survived
                assert versions_matching(answer, image, row + 1, fitted) == [2], (i, row)
