"""Requests and answers of the ``image_classification`` ensemble, without I/O: what the
thread and asyncio classification clients send and read.

Ensemble tensors (model_repository/image_classification/config.pbtxt): inputs ``IMAGE`` BYTES
``[n, 1]`` (encoded JPEG, PNG or WebP file bytes; the server decodes) and ``TOP_K`` INT32
``[n, 1]``; outputs ``LABELS`` BYTES ``[n, k]`` (ImageNet class names), ``SCORES`` FP32
``[n, k]`` (softmax, descending) and ``PROBABILITIES`` FP32 ``[n, 1000]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Classification:
    """One image's top-K: ``labels`` (ImageNet class names) and ``scores`` (softmax
    probabilities, descending), equally long."""

    labels: list[str]
    scores: list[float]

    def as_dict(self) -> dict:
        return {"labels": self.labels, "scores": self.scores}


def read_image(image: bytes | str | Path) -> bytes:
    """An image given as bytes or as a path → its file's bytes (not decoded: the server does).

    Raises:
        OSError: the path cannot be read.
    """
    return bytes(image) if isinstance(image, bytes | bytearray) else Path(image).read_bytes()


def image_list(images: object, what: str = "classify()") -> list[bytes | str | Path]:
    """``images`` as a list, checked: a list of images, not one image.

    Raises:
        ValueError: ``images`` is one image (a ``str``/``Path`` path or ``bytes``: iterating it
            would send each character or byte as an image), an item is neither bytes nor a
            path, or there are none.
    """
    if isinstance(images, str | bytes | bytearray | Path):
        raise ValueError(
            f"{what} takes a list of images (file bytes or paths), not one "
            f"{type(images).__name__}: wrap it in a list, e.g. {what[:-2]}([image])"
        )
    items = list(images)  # type: ignore[call-overload]
    for i, item in enumerate(items):
        if not isinstance(item, str | bytes | bytearray | Path):
            raise ValueError(
                f"{what}: image {i} is a {type(item).__name__}; pass the file's bytes or its path"
            )
    if not items:
        raise ValueError(f"{what} needs at least one image")
    return items


OUTPUTS = ("LABELS", "SCORES")
# FP32 [n, 1000] softmax with a label_filename: the output Triton's classification extension
# ranks (docs/models/classification.md). Never ask for classification of LABELS (BYTES): it
# ends Triton 2.51 (SIGFPE; fixed in 2.59.1).
CLASS_COUNT_OUTPUT = "PROBABILITIES"
NUM_CLASSES = 1000


def request(files: Sequence[bytes], top_k: int) -> dict[str, np.ndarray]:
    """The ensemble's inputs for ``files``: ``IMAGE`` BYTES ``[n, 1]``, ``TOP_K`` INT32
    ``[n, 1]``."""
    return {
        "IMAGE": np.array(list(files), dtype=object).reshape(-1, 1),
        "TOP_K": np.full((len(files), 1), top_k, dtype=np.int32),
    }


def classifications(out: dict[str, np.ndarray]) -> list[Classification]:
    """``LABELS`` BYTES ``[n, k]`` and ``SCORES`` FP32 ``[n, k]`` → one
    :class:`Classification` per image."""
    return [
        Classification(
            [x.decode() if isinstance(x, bytes) else str(x) for x in labels],
            [float(s) for s in scores],
        )
        for labels, scores in zip(out["LABELS"], out["SCORES"], strict=True)
    ]


def parse_class_strings(rows: np.ndarray) -> list[Classification]:
    """Triton's classification extension answer, BYTES ``[n, K]`` of
    ``b"<probability>:<index>:<label>"`` → one :class:`Classification` per row.

    Raises:
        ValueError: an element has no label (the output's config names no label_filename).
    """
    results = []
    for row in rows:
        labels, scores = [], []
        for entry in row:
            text = entry.decode() if isinstance(entry, bytes) else str(entry)
            parts = text.split(":", 2)
            if len(parts) != 3:
                raise ValueError(f"classification '{text}' has no label")
            scores.append(float(parts[0]))
            labels.append(parts[2])
        results.append(Classification(labels, scores))
    return results


def check_top_k(top_k: int) -> None:
    """Raises ValueError when ``top_k`` < 1."""
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")


def batches(files: Sequence[bytes], batch_size: int) -> list[list[bytes]]:
    """``files`` cut into requests of at most ``batch_size`` (the ensemble's
    ``max_batch_size``), in order.

    Raises:
        ValueError: ``batch_size`` < 1.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    return [list(files[i : i + batch_size]) for i in range(0, len(files), batch_size)]


def class_count_request(files: Sequence[bytes], top_k: int) -> tuple[dict[str, np.ndarray], int]:
    """``({"IMAGE": BYTES [n, 1]}, class_count)`` asking Triton's classification extension for
    the top ``top_k`` of ``PROBABILITIES`` (``class_count`` cut to :data:`NUM_CLASSES`)."""
    images = {"IMAGE": np.array(list(files), dtype=object).reshape(-1, 1)}
    return images, min(top_k, NUM_CLASSES)
