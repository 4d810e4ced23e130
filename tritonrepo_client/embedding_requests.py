"""Requests and answers of the ``text_embedding`` ensemble, without I/O: what
:class:`tritonrepo_client.EmbeddingClient` and its asyncio twin send and read.

Ensemble tensors (model_repository/text_embedding/config.pbtxt): input ``TEXT`` BYTES
``[batch, 1]`` (UTF-8), output ``EMBEDDING`` FP32 ``[batch, 384]``, rows L2-normalised.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tritonrepo_client.errors import RequestRejected
from tritonrepo_client.triton_messages import item_indices

INPUT = "TEXT"
OUTPUT = "EMBEDDING"
OUTPUTS = [OUTPUT]


class BadText(RequestRejected):
    """The server refused one text of a bulk job; ``index`` is its 0-based position in the
    input (the line number minus one for a file)."""

    def __init__(self, message: str, index: int) -> None:
        super().__init__(message)
        self.index = index


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


def text_batches(encoded: Sequence[bytes], batch_size: int) -> list[dict[str, np.ndarray]]:
    """The inputs of one request per ``batch_size`` texts, in order: ``{"TEXT": BYTES [b, 1]}``
    with ``b`` <= ``batch_size`` (the ensemble's ``max_batch_size``).

    Raises:
        ValueError: ``batch_size`` < 1.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    return [
        {INPUT: np.array(list(encoded[i : i + batch_size]), dtype=object).reshape(-1, 1)}
        for i in range(0, len(encoded), batch_size)
    ]


def embeddings(answers: Sequence[dict[str, np.ndarray]]) -> np.ndarray:
    """The answers of :func:`text_batches`' requests, in order → FP32 ``[n, 384]``."""
    return np.concatenate([answer[OUTPUT] for answer in answers], axis=0)


def check_stream(batch_size: int, concurrency: int) -> None:
    """Check ``embed_iter``'s ``batch_size`` (texts per request) and ``concurrency``
    (requests in flight).

    Raises:
        ValueError: either < 1.
    """
    if batch_size < 1 or concurrency < 1:
        raise ValueError(
            f"batch_size and concurrency must be >= 1, got {batch_size}, {concurrency}"
        )


def bad_text(exc: RequestRejected, offset: int) -> BadText | None:
    """The :class:`BadText` of a refused batch that started at text ``offset`` of a stream,
    when Triton's message names the text (``TEXT[i]``, the tokenizer's per-item refusal:
    :data:`tritonrepo_client.triton_messages.Kind.ITEM_ERROR`); None otherwise."""
    found = item_indices(str(exc), INPUT)
    return BadText(str(exc), offset + found[0]) if found else None
