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


def encode_texts(
    texts: Sequence[str | bytes], what: str = "embed()", offset: int = 0
) -> list[bytes]:
    """``texts`` as UTF-8 bytes, one item per text, after checking that it is a sequence of
    texts (``str``, or ``bytes`` already UTF-8). Items are named by index plus ``offset``.

    Raises:
        ValueError: ``texts`` is one ``str``/``bytes`` (its characters would be embedded one by
            one), not a sequence, empty, or holds an item that is not ``str``/``bytes`` (a
            number or an array would be embedded as its printed form); the message names the
            item and the fix.
    """
    if isinstance(texts, str | bytes | bytearray | memoryview):
        preview = texts[:20] if isinstance(texts, str) else bytes(texts[:20])
        more = "..." if len(texts) > 20 else ""
        raise ValueError(
            f"{what} takes a list of texts, got one {type(texts).__name__} ({preview!r}{more}): "
            "pass [text] to embed it as one text"
        )
    if isinstance(texts, np.ndarray) and texts.ndim != 1:
        raise ValueError(
            f"{what} takes a 1-D list of texts, got an array of shape {texts.shape}: pass a "
            "list of str"
        )
    try:
        items = list(texts)
    except TypeError:
        raise ValueError(
            f"{what} takes a list of texts, got {type(texts).__name__}: pass a list of str"
        ) from None
    if not items:
        raise ValueError(f"{what} needs at least one text")
    encoded = []
    for i, text in enumerate(items):
        if isinstance(text, str):
            encoded.append(text.encode("utf-8"))
        elif isinstance(text, bytes | bytearray):
            encoded.append(bytes(text))
        else:
            raise ValueError(
                f"{what} embeds text: item {offset + i} is {type(text).__name__} "
                f"{text!r:.40}, not str or bytes; pass str(value) if you mean its printed form"
            )
    return encoded


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
            ServerUnreachable: no server at the URL.
            ClientError: the server rejected the request (message from Triton).
        """
        encoded = encode_texts(texts)
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
            ValueError: ``concurrency`` < 1 or ``batch_size`` < 1; ``texts`` is one
                ``str``/``bytes``, or an item is not text (:func:`encode_texts`).
            ClientError: any other failure (see :meth:`embed`).
        """
        if isinstance(texts, str | bytes | bytearray | memoryview):
            encode_texts(texts, "embed_iter()")  # raises: one text, not a stream of texts
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
                    match = _ITEM.search(str(exc))
                    if match is None:
                        raise
                    raise BadText(str(exc), offset + int(match.group(1))) from None
