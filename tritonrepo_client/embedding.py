"""Clients of the ``text_embedding`` ensemble: :class:`EmbeddingClient` (threads) and
:class:`AsyncEmbeddingClient` (asyncio). Both build their requests and read the answers with
:mod:`tritonrepo_client.embedding_requests`."""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from tritonrepo_client.async_connection import AsyncModelClient
from tritonrepo_client.connection import ModelClient
from tritonrepo_client.embedding_requests import (
    OUTPUTS,
    BadText,
    bad_text,
    check_stream,
    embeddings,
    encode_texts,
    text_batches,
)
from tritonrepo_client.errors import RequestRejected

_SINGLE = str | bytes | bytearray | memoryview


def cosine_similarity_matrix(vectors: np.ndarray) -> np.ndarray:
    """Cosine similarity of every pair of rows: FP32 ``[n, d]`` → FP32 ``[n, n]``.

    Rows of zero norm get similarity 0 with everything.
    """
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    unit = vectors / np.where(norms == 0, 1, norms)
    return (unit @ unit.T).astype(np.float32)


class EmbeddingClient(ModelClient):
    """Sentence embeddings from the ``text_embedding`` ensemble (arguments: :class:`ModelClient`;
    ``model`` defaults to ``text_embedding``)."""

    DEFAULT_MODEL = "text_embedding"

    def embed(
        self,
        texts: Sequence[str | bytes],
        model_version: str = "",
        timeout_s: float | None = None,
        priority: int | None = None,
        timeout_us: int | None = None,
    ) -> np.ndarray:
        """Embed ``texts``; FP32 ``[len(texts), 384]``, rows L2-normalised.

        More texts than the ensemble's ``max_batch_size`` are sent as several requests, each
        with the deadline ``timeout_s`` seconds (default: the client's). ``priority``: 1
        realtime, 2 bulk (default: the client's); ``timeout_us``: Triton's queue timeout in µs
        when it should differ from the deadline (:mod:`tritonrepo_client.scheduling`).

        Raises:
            ValueError: ``texts`` is empty, one ``str``/``bytes`` instead of a list, or holds
                an item that is not ``str``/``bytes`` (:func:`encode_texts`).
            VersionNotLoaded: ``model_version`` is not loaded.
            ServerUnreachable: no server at the URL.
            ClientError: the server rejected the request (message from Triton).
        """
        requests = text_batches(encode_texts(texts), self.max_batch_size)
        options = self.scheduling(priority, timeout_us)
        return embeddings(
            [
                self.connection.infer(
                    self.model, inputs, OUTPUTS, model_version, timeout_s, **options
                )
                for inputs in requests
            ]
        )

    def embed_iter(
        self,
        texts: Iterable[str | bytes],
        batch_size: int | None = None,
        concurrency: int = 4,
        timeout_s: float | None = None,
        priority: int | None = None,
        timeout_us: int | None = None,
    ) -> Iterator[np.ndarray]:
        """Embed a stream of texts of any length with bounded memory: yields FP32
        ``[b, 384]`` arrays, one per batch of ``batch_size`` texts (default: the ensemble's
        ``max_batch_size``), in input order, with at most ``concurrency`` requests in flight;
        ``timeout_s``, ``priority`` and ``timeout_us`` apply to each request (:meth:`embed`).

        Raises:
            BadText: the server refused a text (its ``index`` in the stream is named).
            ValueError: ``concurrency`` < 1 or ``batch_size`` < 1; ``texts`` is one
                ``str``/``bytes``, or an item is not text (:func:`encode_texts`).
            ClientError: any other failure (see :meth:`embed`).
        """
        if isinstance(texts, _SINGLE):
            encode_texts(texts, "embed_iter()")  # raises: one text, not a stream of texts
        size = batch_size or self.max_batch_size
        check_stream(size, concurrency)
        items = iter(texts)
        pending: deque[tuple[int, Future[np.ndarray]]] = deque()
        with ThreadPoolExecutor(concurrency, "tritonrepo-embed") as pool:
            start = 0
            while True:
                while len(pending) < concurrency:
                    batch = list(itertools.islice(items, size))
                    if not batch:
                        break
                    encode_texts(batch, "embed_iter()", start)  # a non-text item: ValueError
                    future = pool.submit(self.embed, batch, "", timeout_s, priority, timeout_us)
                    pending.append((start, future))
                    start += len(batch)
                if not pending:
                    return
                offset, future = pending.popleft()
                try:
                    yield future.result()
                except RequestRejected as exc:
                    for _, other in pending:
                        other.cancel()
                    raise (bad_text(exc, offset) or exc) from None


class AsyncEmbeddingClient(AsyncModelClient):
    """:class:`EmbeddingClient` for asyncio: the same methods and arguments, awaited; more
    texts than ``max_batch_size`` go as concurrent requests."""

    DEFAULT_MODEL = "text_embedding"

    async def embed(
        self,
        texts: Sequence[str | bytes],
        model_version: str = "",
        timeout_s: float | None = None,
        priority: int | None = None,
        timeout_us: int | None = None,
    ) -> np.ndarray:
        """Embed ``texts``: FP32 ``[len(texts), 384]``, rows L2-normalised (as
        :meth:`EmbeddingClient.embed`).

        Raises:
            ValueError, VersionNotLoaded, ServerUnreachable, ClientError: as
                :meth:`EmbeddingClient.embed`.
        """
        encoded = encode_texts(texts)
        requests = text_batches(encoded, await self.max_batch_size())
        options = self.scheduling(priority, timeout_us)
        answers = await asyncio.gather(
            *(
                self.connection.infer(
                    self.model, inputs, OUTPUTS, model_version, timeout_s, **options
                )
                for inputs in requests
            )
        )
        return embeddings(answers)

    async def embed_iter(
        self,
        texts: Iterable[str | bytes],
        batch_size: int | None = None,
        concurrency: int = 4,
        timeout_s: float | None = None,
        priority: int | None = None,
        timeout_us: int | None = None,
    ) -> AsyncIterator[np.ndarray]:
        """:meth:`EmbeddingClient.embed_iter` for asyncio (``async for``): FP32 ``[b, 384]``
        per batch, in input order, at most ``concurrency`` requests in flight.

        Raises:
            BadText, ValueError, ClientError: as :meth:`EmbeddingClient.embed_iter`.
        """
        if isinstance(texts, _SINGLE):
            encode_texts(texts, "embed_iter()")  # raises: one text, not a stream of texts
        size = batch_size or await self.max_batch_size()
        check_stream(size, concurrency)
        items = iter(texts)
        pending: deque[tuple[int, asyncio.Future[np.ndarray]]] = deque()
        try:
            start = 0
            while True:
                while len(pending) < concurrency:
                    batch = list(itertools.islice(items, size))
                    if not batch:
                        break
                    encode_texts(batch, "embed_iter()", start)  # a non-text item: ValueError
                    work = self.embed(batch, "", timeout_s, priority, timeout_us)
                    pending.append((start, asyncio.ensure_future(work)))
                    start += len(batch)
                if not pending:
                    return
                offset, future = pending.popleft()
                try:
                    result = await future
                except RequestRejected as exc:
                    raise (bad_text(exc, offset) or exc) from None
                yield result
        finally:
            for _, other in pending:
                other.cancel()


__all__ = [
    "AsyncEmbeddingClient",
    "BadText",
    "EmbeddingClient",
    "cosine_similarity_matrix",
    "encode_texts",
]
