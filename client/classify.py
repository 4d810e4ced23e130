"""Client of the ``image_classification`` ensemble: image files in, ImageNet labels out."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tritonrepo_client.aio import AsyncModelClient
from tritonrepo_client.connection import ClientError, ModelClient, build_request
from tritonrepo_client.scheduling import scheduling_kwargs


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


class ClassificationClient(ModelClient):
    """ImageNet classification of image files (JPEG, PNG, WebP) by the ``image_classification``
    ensemble (arguments: :class:`ModelClient`; ``model`` defaults to
    ``image_classification``). Safe to share across threads."""

    DEFAULT_MODEL = "image_classification"

    def classify(
        self,
        images: Sequence[bytes | str | Path],
        top_k: int = 5,
        model_version: str = "",
        timeout_s: float | None = None,
        via_class_count: bool = False,
    ) -> list[Classification]:
        """Classify ``images`` (file bytes or paths); one :class:`Classification` per image.

        The images travel together, up to ``max_batch_size`` per request, so one bad image
        fails its whole request (the message names it as ``IMAGE[i]`` within that request);
        use :meth:`classify_each` to get a result or an error per image.

        ``via_class_count``: ask Triton's classification extension for the top ``top_k`` of
        the ``PROBABILITIES`` output (``class_count``) instead of reading ``LABELS`` and
        ``SCORES``; the result is the same (probabilities as Triton prints them, 6 digits).

        Raises:
            ValueError: no images, one image not in a list (a bare path or bytes), an item
                that is neither bytes nor a path, or ``top_k`` < 1.
            OSError: a path cannot be read.
            RequestRejected: the server refused an image (not an image, truncated, over a
                limit), or another :class:`ClientError`.
        """
        images = image_list(images)
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        files = [read_image(image) for image in images]
        results: list[Classification] = []
        for start in range(0, len(files), self.max_batch_size):
            if via_class_count:
                batch = files[start : start + self.max_batch_size]
                results += self._class_count(batch, top_k, model_version, timeout_s)
                continue
            out = self.connection.infer(
                self.model,
                request(files[start : start + self.max_batch_size], top_k),
                OUTPUTS,
                model_version=model_version,
                timeout_s=timeout_s,
                priority=self.priority,
                timeout_us=self.timeout_us,
            )
            results += classifications(out)
        return results

    def _class_count(
        self, files: Sequence[bytes], top_k: int, model_version: str, timeout_s: float | None
    ) -> list[Classification]:
        """One request asking for ``PROBABILITIES`` with ``class_count=top_k`` (cut to 1000)."""
        conn = self.connection
        deadline = conn.timeout_s if timeout_s is None else timeout_s
        images = {"IMAGE": np.array(list(files), dtype=object).reshape(-1, 1)}
        tensors, _ = build_request(conn.module, images, [])
        count = min(top_k, NUM_CLASSES)
        requested = [conn.module.InferRequestedOutput(CLASS_COUNT_OUTPUT, class_count=count)]
        kwargs = scheduling_kwargs(self.priority, self.timeout_us, deadline)
        if conn.protocol == "grpc":
            kwargs["client_timeout"] = deadline
        result = conn.call(
            f"infer {self.model}",
            lambda: conn.client.infer(
                self.model, tensors, model_version=model_version, outputs=requested, **kwargs
            ),
            retry=conn.retry,
            timeout_s=deadline,
        )
        return parse_class_strings(result.as_numpy(CLASS_COUNT_OUTPUT))

    def classify_each(
        self,
        images: Sequence[bytes | str | Path],
        top_k: int = 5,
        concurrency: int = 4,
        timeout_s: float | None = None,
    ) -> list[Classification | ClientError | OSError]:
        """One request per image, ``concurrency`` in flight: a bad image gets its own error
        (a :class:`ClientError`, or the ``OSError`` of an unreadable path) and the others are
        classified. The server's dynamic batcher still batches them together."""

        def one(image: bytes | str | Path) -> Classification | ClientError | OSError:
            try:
                return self.classify([image], top_k, timeout_s=timeout_s)[0]
            except (ClientError, OSError) as exc:
                return exc

        images = image_list(images, "classify_each()")
        with ThreadPoolExecutor(max(1, concurrency), "tritonrepo-classify") as pool:
            return list(pool.map(one, images))


class AsyncClassificationClient(AsyncModelClient):
    """:class:`ClassificationClient` for asyncio (arguments:
    :class:`tritonrepo_client.aio.AsyncModelClient`)."""

    DEFAULT_MODEL = "image_classification"
    _max_batch_size: int | None = None

    async def classify(
        self,
        images: Sequence[bytes | str | Path],
        top_k: int = 5,
        timeout_s: float | None = None,
    ) -> list[Classification]:
        """As :meth:`ClassificationClient.classify`; more images than ``max_batch_size`` go as
        concurrent requests.

        Raises:
            ValueError, OSError, ClientError: as :meth:`ClassificationClient.classify`.
        """
        images = image_list(images)
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        if self._max_batch_size is None:
            config = await self.connection.model_config(self.model)
            self._max_batch_size = int(config["max_batch_size"])
        files = [read_image(image) for image in images]
        chunk = self._max_batch_size
        parts = await asyncio.gather(
            *(
                self.connection.infer(
                    self.model,
                    request(files[i : i + chunk], top_k),
                    OUTPUTS,
                    timeout_s=timeout_s,
                    priority=self.priority,
                    timeout_us=self.timeout_us,
                )
                for i in range(0, len(files), chunk)
            )
        )
        return [c for out in parts for c in classifications(out)]


def print_classifications(
    names: Sequence[object], results: Sequence[Classification | Exception], as_json: bool = False
) -> int:
    """Print one top-K table per image (rich), or one JSON line each with ``as_json``; an
    image that failed gets an ``error:`` line on stderr. Returns the exit status: 0 when every
    image was classified, else 1."""
    import json
    import sys

    from rich.console import Console
    from rich.table import Table

    console = Console()
    failed = 0
    for name, result in zip(names, results, strict=True):
        if isinstance(result, Exception):
            failed += 1
            print(f"error: {name}: {result}", file=sys.stderr)
        elif as_json:
            print(json.dumps({"image": str(name)} | result.as_dict(), ensure_ascii=False))
        else:
            console.print(str(name), markup=False, highlight=False, soft_wrap=True)
            table = Table()
            table.add_column("#", justify="right")
            table.add_column("class")
            table.add_column("probability", justify="right")
            rows = zip(result.labels, result.scores, strict=True)
            for rank, (label, score) in enumerate(rows, 1):
                table.add_row(str(rank), label, f"{score:.4f}")
            console.print(table)
    return 1 if failed else 0
