"""The semantic-search example (``examples/semantic_search``) as a user runs it: a real uvicorn
subprocess on a free port, talking gRPC to the session's Triton server, checked against
sentence-transformers under concurrent load; its input limits and Triton-error statuses; and
the same app over HTTP with no Triton behind it (live, not ready, 503s)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from starlette.requests import Request

from examples.semantic_search import app as search_app
from tritonrepo.paths import BUILD_DIR
from tritonrepo.server.launcher import TritonServer, free_port
from tritonrepo_client import (
    ClientError,
    DeadlineExceeded,
    RequestRejected,
    ServerUnavailable,
    ServerUnreachable,
    VersionNotLoaded,
)

pytestmark = pytest.mark.server
ROOT = Path(__file__).resolve().parents[2]
READY_DEADLINE_S = 90.0
# A paraphrase of one bundled document (no shared key phrase) -> that document's id.
PARAPHRASES = {
    "How many days does regular delivery take to arrive?": "ship-001",
    "I forgot my password and cannot sign in": "acc-001",
    "Can I pay with PayPal or Apple Pay?": "pay-001",
    "How should I clean my down coat in the washing machine?": "care-001",
    "What time do your shops open on Sunday?": "sto-001",
    "The tracking says my parcel was delivered but it is not here": "ship-007",
    "Is there a discount when our club buys gear for the whole team?": "ord-006",
    "Something in my parcel came damaged, can you send a new one?": "ret-007",
}


@dataclass
class App:
    """A running example app: its base URL, process and log file."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path


def call(app: App, method: str, path: str, body: Any = None) -> tuple[int, dict[str, Any]]:
    """One HTTP request to ``app``; returns (status, JSON body). Raw bytes for ``str`` bodies."""
    data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    request = urllib.request.Request(
        app.url + path,
        data=None if body is None else data,
        method=method,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@contextlib.contextmanager
def run_app(name: str, env: dict[str, str], wait_for: str) -> Iterator[App]:
    """Start ``uvicorn examples.semantic_search.app:app`` on a free port with ``env`` added,
    wait (up to READY_DEADLINE_S) until ``wait_for`` answers 200, yield, then SIGTERM it and
    require a clean exit (lifespan shutdown closes the client)."""
    port = free_port()
    log = BUILD_DIR / "test-logs" / f"{name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "uvicorn", "examples.semantic_search.app:app"]
    with log.open("wb") as log_handle:
        process = subprocess.Popen(
            [*command, "--host", "127.0.0.1", "--port", str(port)],
            cwd=ROOT, env={**os.environ, **env}, stdout=log_handle, stderr=subprocess.STDOUT,
        )  # fmt: skip
    app = App(f"http://127.0.0.1:{port}", process, log)
    try:
        deadline = time.monotonic() + READY_DEADLINE_S
        while True:
            if process.poll() is not None:
                pytest.fail(f"app exited with {process.returncode}:\n{log.read_text()[-3000:]}")
            with contextlib.suppress(OSError):
                if call(app, "GET", wait_for)[0] == 200:
                    break
            if time.monotonic() > deadline:
                pytest.fail(f"{wait_for} not 200 after {READY_DEADLINE_S:g} s:\n{log.read_text()}")
            time.sleep(0.2)
        yield app
    finally:
        process.terminate()
        try:
            code = process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            pytest.fail(f"app did not stop on SIGTERM within 20 s:\n{log.read_text()[-3000:]}")
    # uvicorn >= 0.29 re-raises the signal after its graceful shutdown: -SIGTERM is clean.
    text = log.read_text()
    assert code in (0, -signal.SIGTERM), f"app exited with {code}:\n{text[-3000:]}"
    assert "Application shutdown complete." in text, text[-3000:]


@pytest.fixture(scope="module")
def search(triton_server: TritonServer) -> Iterator[App]:
    """The example app on the session's Triton over gRPC, ready (documents embedded)."""
    env = {"TRITON_URL": triton_server.options.grpc_url, "TRITON_PROTOCOL": "grpc"}
    with run_app("example_app", env, "/readyz") as app:
        yield app


@pytest.fixture(scope="module")
def documents() -> list[search_app.Document]:
    return search_app.load_documents(search_app.DEFAULT_DOCUMENTS)


@pytest.fixture(scope="module")
def reference_documents(documents, reference_embed) -> np.ndarray:
    """sentence-transformers' FP32 [n_documents, 384] unit embeddings of the document texts."""
    return reference_embed([doc.text for doc in documents])


def test_concurrent_requests_match_the_reference(
    search: App, documents, reference_documents, reference_embed
) -> None:
    """64 concurrent requests (searches with k 1..10 and embeds): each top hit is the
    paraphrased document, scores descend and equal sentence-transformers' cosine similarities
    (1e-4), the hits are the reference top-k, and /embed rows match the reference."""
    queries = list(PARAPHRASES)
    reference_queries = dict(zip(queries, reference_embed(queries), strict=True))
    jobs: list[tuple[str, dict[str, Any]]] = []
    for i in range(64):
        query = queries[i % len(queries)]
        if i % 4 == 3:
            jobs.append(("/embed", {"texts": [query, documents[i].text]}))
        else:
            jobs.append(("/search", {"query": query, "k": 1 + i % 10}))

    with ThreadPoolExecutor(max_workers=16) as pool:
        answers = list(pool.map(lambda job: call(search, "POST", *job), jobs))

    row = {doc.id: i for i, doc in enumerate(documents)}
    for (path, body), (status, answer) in zip(jobs, answers, strict=True):
        assert status == 200, (path, body, answer)
        if path == "/embed":
            vectors = np.asarray(answer["embeddings"], dtype=np.float32)
            assert vectors.shape == (2, 384) and answer["dimensions"] == 384
            expected = np.stack(
                [reference_queries[body["texts"][0]], reference_documents[row_of(body, documents)]]
            )
            np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
            assert (np.sum(vectors * expected, axis=1) > 0.9999).all()
            continue
        hits = answer["hits"]
        assert len(hits) == body["k"] and hits[0]["id"] == PARAPHRASES[body["query"]], hits[:3]
        scores = np.array([hit["score"] for hit in hits])
        assert (np.diff(scores) <= 0).all(), scores
        cosines = reference_documents @ reference_queries[body["query"]]
        expected = cosines[[row[hit["id"]] for hit in hits]]
        np.testing.assert_allclose(scores, expected, atol=1e-4)
        # The hits are the reference's top k (up to near-ties at the k-th place).
        assert scores[-1] >= np.sort(cosines)[::-1][body["k"] - 1] - 1e-4
        doc = documents[row[hits[0]["id"]]]
        assert (hits[0]["title"], hits[0]["text"]) == (doc.title, doc.text)


def row_of(body: dict[str, Any], documents: list[search_app.Document]) -> int:
    """Index of the document whose text is ``body["texts"][1]``."""
    return next(i for i, doc in enumerate(documents) if doc.text == body["texts"][1])


@pytest.mark.parametrize(
    ("path", "body", "where"),
    [
        ("/search", {"query": "tents", "k": 0}, ["body", "k"]),
        ("/search", {"query": "tents", "k": search_app.MAX_K + 1}, ["body", "k"]),
        ("/search", {"query": "", "k": 3}, ["body", "query"]),
        ("/search", {"query": " \t\n", "k": 3}, ["body", "query"]),
        ("/search", {"query": "x" * (search_app.MAX_QUERY_CHARS + 1)}, ["body", "query"]),
        ("/search", {"k": 3}, ["body", "query"]),
        ("/search", "{not json", ["body", 1]),
        ("/embed", {"texts": []}, ["body", "texts"]),
        ("/embed", {"texts": ["ok"] * (search_app.MAX_EMBED_TEXTS + 1)}, ["body", "texts"]),
        ("/embed", {"texts": ["a" * (search_app.MAX_EMBED_TEXT_CHARS + 1)]}, ["body", "texts", 0]),
    ],
    ids=[
        "k=0", "k>max", "empty-query", "blank-query", "long-query", "no-query", "bad-json",
        "no-texts", "too-many-texts", "long-text",
    ],
)  # fmt: skip
def test_invalid_requests_are_422(search: App, path: str, body: Any, where: list[Any]) -> None:
    """Each input limit is a 422 that names the field."""
    status, answer = call(search, "POST", path, body)
    assert status == 422, answer
    assert [error["loc"][: len(where)] for error in answer["detail"]] == [where], answer


def test_text_refused_by_triton_is_400_with_its_message(search: App) -> None:
    """A text within the app's character bound but over Triton's 64 KiB of UTF-8 (20,000 emoji,
    80,000 bytes): 400 with Triton's message; the app keeps serving."""
    status, answer = call(search, "POST", "/embed", {"texts": ["fine", "😀" * 20_000]})
    assert status == 400, answer
    assert answer["kind"] == "invalid"
    assert "80000 bytes, over the limit of 65536 bytes" in answer["detail"], answer
    status, answer = call(
        search, "POST", "/search", {"query": "how many days to return unworn clothes", "k": 1}
    )
    assert status == 200 and answer["hits"][0]["id"] == "ret-001", answer


def test_health_endpoints(search: App) -> None:
    assert call(search, "GET", "/healthz") == (200, {"status": "ok"})
    assert call(search, "GET", "/readyz") == (200, {"status": "ready", "documents": 80})


def test_without_triton_live_but_not_ready() -> None:
    """Over HTTP to a port nobody serves: live at once, /readyz 503 (documents not embedded),
    /search 503, /embed 503 (kind "unreachable") within the request deadline."""
    env = {"TRITON_URL": f"127.0.0.1:{free_port()}", "TRITON_PROTOCOL": "http"}
    env["SEARCH_DEADLINE_S"] = "5"
    with run_app("example_app_no_triton", env, "/healthz") as app:
        status, answer = call(app, "GET", "/readyz")
        assert status == 503 and "not embedded" in answer["detail"], answer
        status, answer = call(app, "POST", "/search", {"query": "tents", "k": 2})
        assert (status, answer["kind"]) == (503, "unavailable"), answer
        started = time.monotonic()
        status, answer = call(app, "POST", "/embed", {"texts": ["tents"]})
        assert (status, answer["kind"]) == (503, "unreachable"), answer
        assert "cannot reach Triton" in answer["detail"]
        assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (RequestRejected("TEXT[0] is not valid UTF-8"), 400),
        (ServerUnreachable("cannot reach Triton"), 503),
        (ServerUnavailable("model not loaded"), 503),
        (DeadlineExceeded("deadline of 10 s exceeded"), 504),
        (VersionNotLoaded("version 3 not loaded"), 502),
        (ClientError("internal error"), 502),
    ],
)
def test_client_error_statuses(error: ClientError, status: int) -> None:
    """The mapping of client errors to HTTP statuses (504 cannot be provoked on a fast server)."""
    request = Request({"type": "http", "method": "POST", "path": "/search", "headers": []})
    response = search_app._error_response(request, error)
    assert response.status_code == status
    assert json.loads(response.body) == {"detail": str(error), "kind": error.kind}
    assert (response.headers.get("retry-after") == "1") == (status == 503)
