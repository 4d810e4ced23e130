"""Semantic search over a small document collection, served by FastAPI on the ``text_embedding``
ensemble through :class:`tritonrepo_client.AsyncEmbeddingClient`.

At startup the service loads a JSON-lines file of documents (``{"id", "title", "text"}`` per
line), then a background task embeds every ``text`` through Triton (retrying with backoff until
Triton answers) and keeps the FP32 ``[n_documents, 384]`` matrix of unit rows in memory. The
service is live at once and ready when that matrix exists and Triton answers a probe.

Endpoints:

* ``POST /search {"query": str, "k": int}``: the ``k`` documents most similar to the query, by
  cosine similarity (descending).
* ``POST /embed {"texts": [str, ...]}``: one 384-dim unit FP32 embedding per text.
* ``GET /healthz``: liveness (the process answers); never touches Triton.
* ``GET /readyz``: readiness: documents embedded and a probe embedding from Triton OK.

One client serves every request (created in the lifespan, closed on shutdown); each request has a
deadline of ``SEARCH_DEADLINE_S`` seconds in all, retries included. Client errors become HTTP
statuses: :class:`RequestRejected` 400 (Triton's message), :class:`ServerUnreachable` /
:class:`ServerUnavailable` 503, :class:`DeadlineExceeded` 504, any other Triton error 502.
Invalid bodies (``k`` out of range, an empty or over-long query) are FastAPI's 422.

Configuration (environment variables):

==========================  ==========================================================
``TRITON_URL``              ``host:port`` of Triton (default ``127.0.0.1:8001`` for gRPC,
                            ``127.0.0.1:8000`` for HTTP: ``make serve``'s ports)
``TRITON_PROTOCOL``         ``grpc`` (default) or ``http``
``TRITON_MODEL``            the embedding ensemble (default ``text_embedding``)
``SEARCH_DOCUMENTS``        JSON-lines file of documents (default: the bundled
                            ``documents.jsonl``, 80 store FAQ and product snippets)
``SEARCH_DEADLINE_S``       deadline of one request's Triton work, seconds (default 10)
``SEARCH_INDEX_TIMEOUT_S``  deadline of one attempt at embedding all documents (default 120)
==========================  ==========================================================

Run it against ``make serve``::

    .venv/bin/uvicorn examples.semantic_search.app:app --port 8080
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, field_validator

from tritonrepo_client import (
    AsyncEmbeddingClient,
    ClientError,
    DeadlineExceeded,
    RequestRejected,
    RetryPolicy,
    ServerUnavailable,
    ServerUnreachable,
)
from tritonrepo_client.connection import DEFAULT_URLS

logger = logging.getLogger("uvicorn.error")  # uvicorn's handler and format

DEFAULT_DOCUMENTS = Path(__file__).with_name("documents.jsonl")
EMBEDDING_DIM = 384
# Input limits (violations are 422). A query is one sentence or a few: the model reads only
# its first 256 tokens (about 1-2 KB of English), so longer queries are a client bug.
MAX_QUERY_CHARS = 1000
MAX_K = 50
# /embed takes up to one Triton batch (the ensemble's max_batch_size) of texts per request.
MAX_EMBED_TEXTS = 64
# Characters per /embed text. Triton's own bound is 64 KiB of UTF-8 per text (the tokenizer's
# max_text_bytes); a text within this bound but over Triton's (e.g. 20,000 emoji, 80 KB) is
# refused by Triton: 400 with Triton's message.
MAX_EMBED_TEXT_CHARS = 20_000
# Retries of Triton calls: "unreachable" / "unavailable" only, backoff well under a deadline.
REQUEST_RETRY = RetryPolicy(attempts=3, initial_backoff_s=0.05, max_backoff_s=0.5)
READINESS_DEADLINE_S = 2.0
# Backoff between attempts at embedding the documents while Triton is not there, seconds.
INDEX_BACKOFF_S = (0.5, 10.0)

# HTTP status of each client error (the first class in an error's MRO found here wins).
ERROR_STATUS: dict[type[ClientError], int] = {
    RequestRejected: 400,
    ServerUnreachable: 503,
    ServerUnavailable: 503,
    DeadlineExceeded: 504,
    ClientError: 502,
}


@dataclass(frozen=True)
class Settings:
    """The service's configuration (see the module docstring for the environment variables).

    Attributes:
        triton_url: ``host:port`` of Triton's gRPC or HTTP endpoint.
        protocol: ``"grpc"`` or ``"http"``.
        model: name of the embedding ensemble.
        documents: the JSON-lines document file.
        deadline_s: deadline of one request's Triton work, seconds, > 0.
        index_timeout_s: deadline of one attempt at embedding all documents, seconds, > 0.
    """

    triton_url: str
    protocol: str = "grpc"
    model: str = "text_embedding"
    documents: Path = DEFAULT_DOCUMENTS
    deadline_s: float = 10.0
    index_timeout_s: float = 120.0

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> Settings:
        """Settings from ``env`` (default ``os.environ``).

        Raises:
            ValueError: an unknown protocol or a deadline that is not a positive number.
        """
        env = dict(os.environ if env is None else env)
        protocol = env.get("TRITON_PROTOCOL", "grpc").strip().lower()
        if protocol not in DEFAULT_URLS:
            raise ValueError(f"TRITON_PROTOCOL must be 'grpc' or 'http', got {protocol!r}")
        deadlines = {}
        for name, default in (("SEARCH_DEADLINE_S", 10.0), ("SEARCH_INDEX_TIMEOUT_S", 120.0)):
            value = float(env.get(name, default))
            if not value > 0:
                raise ValueError(f"{name} must be a positive number of seconds, got {value}")
            deadlines[name] = value
        return cls(
            triton_url=env.get("TRITON_URL") or DEFAULT_URLS[protocol],
            protocol=protocol,
            model=env.get("TRITON_MODEL", "text_embedding"),
            documents=Path(env.get("SEARCH_DOCUMENTS") or DEFAULT_DOCUMENTS),
            deadline_s=deadlines["SEARCH_DEADLINE_S"],
            index_timeout_s=deadlines["SEARCH_INDEX_TIMEOUT_S"],
        )


@dataclass(frozen=True)
class Document:
    """One searchable document; ``text`` is what is embedded."""

    id: str
    title: str
    text: str


def load_documents(path: Path) -> list[Document]:
    """Read a JSON-lines file of ``{"id": str, "title": str, "text": str}`` objects (blank lines
    are skipped).

    Raises:
        ValueError: the file holds no document, a line is not such an object, a text is empty or
            an id repeats (the message names the file and line).
        OSError: the file cannot be read.
    """
    documents: list[Document] = []
    seen: set[str] = set()
    lines = path.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            record = json.loads(line)
            doc = Document(id=record["id"], title=record.get("title", ""), text=record["text"])
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ValueError(f"{where}: expected {{'id', 'title', 'text'}} JSON ({exc})") from None
        if not all(isinstance(v, str) for v in (doc.id, doc.title, doc.text)):
            raise ValueError(f"{where}: id, title and text must be strings")
        if not doc.text.strip():
            raise ValueError(f"{where}: document {doc.id!r} has an empty text")
        if doc.id in seen:
            raise ValueError(f"{where}: duplicate document id {doc.id!r}")
        seen.add(doc.id)
        documents.append(doc)
    if not documents:
        raise ValueError(f"{path} holds no documents")
    return documents


def top_k(matrix: np.ndarray, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` rows of ``matrix`` most similar to ``query`` by cosine similarity.

    Args:
        matrix: FP32 ``[n, d]``, unit rows.
        query: FP32 ``[d]``, any non-zero norm (normalised here).
        k: how many, >= 1; more than ``n`` returns all ``n``.

    Returns:
        ``(indices, scores)``: int64 ``[min(k, n)]`` row indices and their FP32 cosine
        similarities in [-1, 1], descending (ties in row order).
    """
    q = query / np.linalg.norm(query)
    scores = matrix @ q.astype(np.float32)
    k = min(k, len(scores))
    best = np.argpartition(-scores, k - 1)[:k]
    order = best[np.lexsort((best, -scores[best]))]
    return order.astype(np.int64), scores[order]


# ---- request and response bodies -------------------------------------------------------------


class SearchRequest(BaseModel):
    """Body of ``POST /search``."""

    query: str = Field(
        min_length=1,
        max_length=MAX_QUERY_CHARS,
        description=f"What to search for, 1..{MAX_QUERY_CHARS} characters, not only blanks.",
    )
    k: int = Field(
        default=5, ge=1, le=MAX_K, description=f"How many documents to return, 1..{MAX_K}."
    )

    @field_validator("query")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("query must contain a non-whitespace character")
        return value


class SearchHit(BaseModel):
    """One result: the document and its cosine similarity to the query (in [-1, 1])."""

    id: str
    title: str
    text: str
    score: float


class SearchResponse(BaseModel):
    """Body of a ``POST /search`` answer: ``min(k, n_documents)`` hits, best first."""

    query: str
    model: str
    hits: list[SearchHit]


EmbedText = Annotated[str, Field(max_length=MAX_EMBED_TEXT_CHARS)]


class EmbedRequest(BaseModel):
    """Body of ``POST /embed``: 1..64 texts of up to 20,000 characters each (empty allowed)."""

    texts: list[EmbedText] = Field(min_length=1, max_length=MAX_EMBED_TEXTS)


class EmbedResponse(BaseModel):
    """Body of a ``POST /embed`` answer: ``embeddings`` is ``[len(texts), 384]`` FP32 values
    (as JSON numbers), each row of unit L2 norm, in the order of ``texts``."""

    model: str
    dimensions: int
    embeddings: list[list[float]]


class ErrorResponse(BaseModel):
    """Body of a 4xx/5xx answer caused by Triton: ``kind`` is the client error's kind
    (``invalid``, ``unreachable``, ``unavailable``, ``timeout``, ``server``, ...)."""

    detail: str
    kind: str


# ---- the service ------------------------------------------------------------------------------


@dataclass
class SearchIndex:
    """The documents and, once embedded, their FP32 ``[n, 384]`` matrix of unit rows."""

    documents: list[Document]
    matrix: np.ndarray | None = None
    error: str | None = None  # the last failure to embed the documents, while there is none
    built_at: float | None = None  # time.time() when the matrix was made
    task: asyncio.Task[None] | None = field(default=None, repr=False)


async def embed(
    client: AsyncEmbeddingClient, texts: Sequence[str], deadline_s: float
) -> np.ndarray:
    """Embed ``texts`` through Triton within ``deadline_s`` seconds in all (retries included).

    Returns:
        FP32 ``[len(texts), 384]``, unit rows.

    Raises:
        DeadlineExceeded: the deadline passed.
        ClientError: another failure (see :class:`tritonrepo_client.AsyncEmbeddingClient`).
    """
    try:
        return await asyncio.wait_for(client.embed(texts, timeout_s=deadline_s), deadline_s)
    except asyncio.TimeoutError:
        raise DeadlineExceeded(f"embedding: deadline of {deadline_s:g} s exceeded") from None


async def build_index(client: AsyncEmbeddingClient, index: SearchIndex, settings: Settings) -> None:
    """Embed every document into ``index.matrix``, retrying with exponential backoff (capped at
    10 s) for as long as Triton fails; a RequestRejected (a document Triton refuses) is logged
    and ends the attempts: the service then stays not ready."""
    texts = [doc.text for doc in index.documents]
    delay, cap = INDEX_BACKOFF_S
    while True:
        started = time.perf_counter()
        try:
            matrix = await embed(client, texts, settings.index_timeout_s)
        except ClientError as exc:
            index.error = f"{type(exc).__name__}: {exc}"
            if isinstance(exc, RequestRejected):
                logger.error("documents cannot be embedded, not retrying: %s", exc)
                return
            logger.warning("embedding documents failed, retrying in %.1f s: %s", delay, exc)
            await asyncio.sleep(delay)
            delay = min(cap, delay * 2)
            continue
        if matrix.shape != (len(texts), EMBEDDING_DIM) or not np.isfinite(matrix).all():
            index.error = f"Triton returned embeddings of shape {matrix.shape}"
            logger.error("documents cannot be indexed: %s", index.error)
            return
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        index.matrix = (matrix / norms).astype(np.float32)
        index.error = None
        index.built_at = time.time()
        logger.info(
            "embedded %d documents in %.2f s through %s (%s)",
            len(texts), time.perf_counter() - started, settings.triton_url, settings.protocol,
        )  # fmt: skip
        return


def _error_response(request: Request, exc: Exception) -> JSONResponse:
    """The JSON answer for a :class:`ClientError` (statuses: ``ERROR_STATUS``)."""
    assert isinstance(exc, ClientError)
    status = next(ERROR_STATUS[c] for c in type(exc).__mro__ if c in ERROR_STATUS)
    headers = {"Retry-After": "1"} if status == 503 else None
    if status >= 500:
        logger.warning("%s %s -> %d: %s", request.method, request.url.path, status, exc)
    body = ErrorResponse(detail=str(exc), kind=exc.kind)
    return JSONResponse(body.model_dump(), status_code=status, headers=headers)


def _not_ready(reason: str) -> JSONResponse:
    body = ErrorResponse(detail=reason, kind="not_ready")
    return JSONResponse(body.model_dump(), status_code=503, headers={"Retry-After": "1"})


def create_app(settings: Settings | None = None) -> FastAPI:
    """The FastAPI application (``settings`` default: :meth:`Settings.from_env`).

    Raises:
        ValueError: invalid settings.
    """
    settings = settings or Settings.from_env()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        documents = load_documents(settings.documents)  # a bad file stops the startup
        client = AsyncEmbeddingClient(
            settings.triton_url,
            settings.protocol,  # type: ignore[arg-type]
            model=settings.model,
            timeout_s=settings.deadline_s,
            retry=REQUEST_RETRY,
        )
        index = SearchIndex(documents)
        index.task = asyncio.create_task(build_index(client, index, settings))
        app.state.client, app.state.index = client, index
        logger.info(
            "%d documents from %s; Triton %s over %s, model %s",
            len(documents), settings.documents, settings.triton_url, settings.protocol,
            settings.model,
        )  # fmt: skip
        try:
            yield
        finally:
            index.task.cancel()
            await asyncio.gather(index.task, return_exceptions=True)
            await client.close()

    app = FastAPI(
        title="Semantic search on Triton",
        summary="Top-k documents by cosine similarity of all-MiniLM-L6-v2 embeddings.",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.add_exception_handler(ClientError, _error_response)
    error_responses: dict[int | str, dict[str, Any]] = {
        code: {"model": ErrorResponse} for code in (400, 502, 503, 504)
    }

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        """Liveness: the process serves HTTP. Does not call Triton."""
        return {"status": "ok"}

    @app.get("/readyz", responses={503: {"model": ErrorResponse}})
    async def readyz(request: Request) -> Any:
        """Readiness: the documents are embedded and Triton embeds a probe sentence (FP32
        ``[1, 384]``) within 2 s."""
        index: SearchIndex = request.app.state.index
        if index.matrix is None:
            return _not_ready(f"documents not embedded yet ({index.error or 'in progress'})")
        try:
            probe = await embed(request.app.state.client, ["readiness probe"], READINESS_DEADLINE_S)
        except ClientError as exc:
            return _not_ready(f"Triton does not answer: {exc}")
        if probe.shape != (1, EMBEDDING_DIM):
            return _not_ready(f"Triton returned an embedding of shape {probe.shape}")
        return {"status": "ready", "documents": len(index.documents)}

    @app.post("/search", responses=error_responses)
    async def search(body: SearchRequest, request: Request) -> SearchResponse:
        """The ``k`` documents most similar to ``query`` (cosine similarity, descending); all
        documents when there are fewer than ``k``."""
        index: SearchIndex = request.app.state.index
        if index.matrix is None:
            raise ServerUnavailable("the documents are not embedded yet; retry shortly")
        vector = await embed(request.app.state.client, [body.query], settings.deadline_s)
        rows, scores = top_k(index.matrix, vector[0], body.k)
        hits = [
            SearchHit(**vars(index.documents[row]), score=float(score))
            for row, score in zip(rows, scores, strict=True)
        ]
        return SearchResponse(query=body.query, model=settings.model, hits=hits)

    @app.post("/embed", responses=error_responses)
    async def embed_texts(body: EmbedRequest, request: Request) -> EmbedResponse:
        """One embedding (384 FP32 values, unit L2 norm) per text, in order."""
        vectors = await embed(request.app.state.client, body.texts, settings.deadline_s)
        return EmbedResponse(
            model=settings.model, dimensions=int(vectors.shape[1]), embeddings=vectors.tolist()
        )

    return app


app = create_app()
