"""Clients of the ``image_classification`` ensemble, image files in, ImageNet labels out:
:class:`ClassificationClient` (threads) and :class:`AsyncClassificationClient` (asyncio).
Requests and answers: :mod:`tritonrepo_client.classify_requests`."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from tritonrepo_client.async_connection import AsyncModelClient
from tritonrepo_client.classify_requests import (
    CLASS_COUNT_OUTPUT,
    NUM_CLASSES,
    OUTPUTS,
    Classification,
    batches,
    check_top_k,
    class_count_request,
    classifications,
    image_list,
    parse_class_strings,
    read_image,
    request,
)
from tritonrepo_client.connection import ClientError, ModelClient

Image = bytes | str | Path
Outcome = Classification | ClientError | OSError


def _prepared(images: Sequence[Image], top_k: int) -> list[bytes]:
    """The checked images' file bytes (ValueError / OSError before anything is sent)."""
    checked = image_list(images)
    check_top_k(top_k)
    return [read_image(image) for image in checked]


def _answers(answer: dict[str, np.ndarray], via_class_count: bool) -> list[Classification]:
    if via_class_count:
        return parse_class_strings(answer[CLASS_COUNT_OUTPUT])
    return classifications(answer)


class ClassificationClient(ModelClient):
    """ImageNet classification of image files (JPEG, PNG, WebP) by the ``image_classification``
    ensemble (arguments: :class:`ModelClient`; ``model`` defaults to
    ``image_classification``). Safe to share across threads."""

    DEFAULT_MODEL = "image_classification"

    def classify(
        self,
        images: Sequence[Image],
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
            VersionNotLoaded: ``model_version`` is not loaded.
            RequestRejected: the server refused an image (not an image, truncated, over a
                limit), or another :class:`ClientError`.
        """
        files = _prepared(images, top_k)
        results: list[Classification] = []
        for batch in batches(files, self.max_batch_size):
            answer = self._infer(batch, top_k, model_version, timeout_s, via_class_count)
            results += _answers(answer, via_class_count)
        return results

    def _infer(
        self,
        files: list[bytes],
        top_k: int,
        model_version: str,
        timeout_s: float | None,
        via_class_count: bool,
    ) -> dict[str, np.ndarray]:
        options = self.scheduling(None, None)
        if via_class_count:
            inputs, count = class_count_request(files, top_k)
            return self.connection.infer(
                self.model, inputs, [CLASS_COUNT_OUTPUT], model_version, timeout_s,
                class_count=count, **options,
            )  # fmt: skip
        return self.connection.infer(
            self.model, request(files, top_k), OUTPUTS, model_version, timeout_s, **options
        )

    def classify_each(
        self,
        images: Sequence[Image],
        top_k: int = 5,
        concurrency: int = 4,
        timeout_s: float | None = None,
    ) -> list[Outcome]:
        """One request per image, ``concurrency`` in flight: a bad image gets its own error
        (a :class:`ClientError`, or the ``OSError`` of an unreadable path) and the others are
        classified. The server's dynamic batcher still batches them together."""

        def one(image: Image) -> Outcome:
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

    async def classify(
        self,
        images: Sequence[Image],
        top_k: int = 5,
        model_version: str = "",
        timeout_s: float | None = None,
        via_class_count: bool = False,
    ) -> list[Classification]:
        """As :meth:`ClassificationClient.classify`; more images than ``max_batch_size`` go as
        concurrent requests.

        Raises:
            ValueError, OSError, VersionNotLoaded, ClientError: as
                :meth:`ClassificationClient.classify`.
        """
        files = _prepared(images, top_k)
        size = await self.max_batch_size()
        answers = await asyncio.gather(
            *(
                self._infer(batch, top_k, model_version, timeout_s, via_class_count)
                for batch in batches(files, size)
            )
        )
        return [c for answer in answers for c in _answers(answer, via_class_count)]

    async def _infer(
        self,
        files: list[bytes],
        top_k: int,
        model_version: str,
        timeout_s: float | None,
        via_class_count: bool,
    ) -> dict[str, np.ndarray]:
        options = self.scheduling(None, None)
        if via_class_count:
            inputs, count = class_count_request(files, top_k)
            return await self.connection.infer(
                self.model, inputs, [CLASS_COUNT_OUTPUT], model_version, timeout_s,
                class_count=count, **options,
            )  # fmt: skip
        return await self.connection.infer(
            self.model, request(files, top_k), OUTPUTS, model_version, timeout_s, **options
        )

    async def classify_each(
        self,
        images: Sequence[Image],
        top_k: int = 5,
        concurrency: int = 4,
        timeout_s: float | None = None,
    ) -> list[Outcome]:
        """As :meth:`ClassificationClient.classify_each`: one request per image, at most
        ``concurrency`` in flight, an error per bad image."""
        limit = asyncio.Semaphore(max(1, concurrency))

        async def one(image: Image) -> Outcome:
            async with limit:
                try:
                    return (await self.classify([image], top_k, timeout_s=timeout_s))[0]
                except (ClientError, OSError) as exc:
                    return exc

        images = image_list(images, "classify_each()")
        return list(await asyncio.gather(*(one(image) for image in images)))


def print_classifications(
    names: Sequence[object],
    results: Sequence[Classification | Exception],
    as_json: bool = False,
    precision: int = 4,
) -> int:
    """Print one top-K table per image (rich), or one JSON line each with ``as_json``; an
    image that failed gets an ``error:`` line on stderr. Returns the exit status: 0 when every
    image was classified, else 1.

    Probabilities are printed with ``precision`` decimals, in the table and in the JSON (the
    last digits of a softmax computed in float32 differ between CPUs and builds).
    """
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
            scores = [round(float(s), precision) for s in result.scores]
            line = {"image": str(name), "labels": result.labels, "scores": scores}
            print(json.dumps(line, ensure_ascii=False))
        else:
            console.print(str(name), markup=False, highlight=False, soft_wrap=True)
            table = Table()
            table.add_column("#", justify="right")
            table.add_column("class")
            table.add_column("probability", justify="right")
            rows = zip(result.labels, result.scores, strict=True)
            for rank, (label, score) in enumerate(rows, 1):
                table.add_row(str(rank), label, f"{score:.{precision}f}")
            console.print(table)
    return 1 if failed else 0


__all__ = [
    "NUM_CLASSES",
    "AsyncClassificationClient",
    "Classification",
    "ClassificationClient",
    "classifications",
    "image_list",
    "parse_class_strings",
    "print_classifications",
    "read_image",
    "request",
]
