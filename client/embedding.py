"""Client of the ``text_embedding`` ensemble."""

from __future__ import annotations

import itertools
import re
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from tritonrepo_client.connection import ModelClient
from tritonrepo_client.errors import RequestRejected

# The tokenizer names a refused item of a batch as "TEXT[i]" (tritonrepo.text.tokenization).
_ITEM = re.compile(r"TEXT\[(\d+)\]")


class BadText(RequestRejected):
    """The server refused one text of a bulk job; ``index`` is its 0-based position in the
    input (the line number minus one for a file)."""

    def __init__(self, message: str, index: int) -> None:
        super().__init__(message)
        self.index = index


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
            ValueError: ``texts`` is empty.
            ServerUnreachable: no server at the URL.
            ClientError: the server rejected the request (message from Triton).
        """
        if len(texts) == 0:
            raise ValueError("embed() needs at least one text")
        encoded = [t.encode("utf-8") if isinstance(t, str) else bytes(t) for t in texts]
        chunk = self.max_batch_size
        parts = []
        for start in range(0, len(encoded), chunk):
            batch = np.array(encoded[start : start + chunk], dtype=object).reshape(-1, 1)
            result = self.connection.infer(
                self.model,
                {"TEXT": batch},
                ["EMBEDDING"],
                model_version=model_version,
                timeout_s=timeout_s,
                priority=self.priority if priority is None else priority,
                timeout_us=self.timeout_us if timeout_us is None else timeout_us,
            )
            parts.append(result["EMBEDDING"])
        return np.concatenate(parts, axis=0)

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
            ValueError: ``concurrency`` < 1 or ``batch_size`` < 1.
            ClientError: any other failure (see :meth:`embed`).
        """
        size = batch_size or self.max_batch_size
        if size < 1 or concurrency < 1:
            raise ValueError(f"batch_size and concurrency must be >= 1, got {size}, {concurrency}")
        items = iter(texts)
        pending: deque[tuple[int, Future[np.ndarray]]] = deque()
        with ThreadPoolExecutor(concurrency, "tritonrepo-embed") as pool:
            start = 0
            while True:
                while len(pending) < concurrency:
                    batch = list(itertools.islice(items, size))
                    if not batch:
                        break
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
                    match = _ITEM.search(str(exc))
                    if match is None:
                        raise
                    raise BadText(str(exc), offset + int(match.group(1))) from None
