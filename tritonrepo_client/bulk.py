"""Bulk embedding of a text file (``tritonrepo-client embed --input texts.txt --output v.npy``).

Line ``i`` (1-based) of the input becomes row ``i - 1`` of an FP32 ``[lines, 384]`` ``.npy``
file. Memory stays bounded whatever the file's length: lines are read lazily, at most
``concurrency`` requests are in flight, and rows go straight to a memory-mapped output. The
output is written under a temporary name and renamed when complete, so a failed job leaves no
half-written file; a bad line either stops the job with its number, or, with
``skip_bad_lines``, gets a row of NaN and is listed in the report.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tritonrepo_client.embedding import BadText, EmbeddingClient
from tritonrepo_client.errors import RequestRejected

DIM = 384  # all-MiniLM-L6-v2's embedding size (its config.json hidden_size)


class BadLine(RequestRejected):
    """A line of the input that cannot be embedded; the message names the file and line."""


@dataclass
class BulkReport:
    """What a bulk job did: ``lines`` embedded rows (bad ones included as NaN), ``seconds`` of
    wall time, and ``bad_lines`` as ``(line number, reason)``."""

    lines: int
    seconds: float
    bad_lines: list[tuple[int, str]] = field(default_factory=list)

    @property
    def texts_per_second(self) -> float:
        """Throughput over the whole job, texts/s."""
        return self.lines / self.seconds if self.seconds > 0 else float("inf")


def count_lines(path: Path) -> int:
    """Number of lines of ``path`` (a last line without a newline counts), read in 1 MiB
    blocks."""
    count, last = 0, b"\n"
    with open(path, "rb") as handle:
        while block := handle.read(1 << 20):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")


def read_lines(path: Path, start: int = 0, blank: frozenset[int] = frozenset()) -> Iterator[bytes]:
    """The lines of ``path`` from 0-based line ``start`` on, as bytes without their line ending
    (``\\n`` or ``\\r\\n``; the server checks the UTF-8); lines whose 0-based index is in
    ``blank`` are sent as empty texts (known bad lines, NaN in the output)."""
    with open(path, "rb") as handle:
        for index, line in enumerate(handle):
            if index >= start:
                yield b"" if index in blank else line.rstrip(b"\n").removesuffix(b"\r")


def embed_file(
    client: EmbeddingClient,
    input_path: Path,
    output_path: Path,
    concurrency: int = 4,
    batch_size: int | None = None,
    skip_bad_lines: bool = False,
    progress: bool = True,
) -> BulkReport:
    """Embed every line of ``input_path`` into ``output_path`` (``.npy``, FP32 ``[n, 384]``).

    Args:
        concurrency: requests in flight at once.
        batch_size: texts per request (default: the ensemble's ``max_batch_size``).
        skip_bad_lines: give a refused line a NaN row and go on (default: stop at it).
        progress: show a progress bar with texts/s on stderr (rich).

    Raises:
        BadLine: a line was refused and ``skip_bad_lines`` is off (no output is written).
        ClientError: the server failed otherwise.
        OSError: the files cannot be read or written.
    """
    total = count_lines(input_path)
    tmp = output_path.with_name(output_path.name + ".partial")
    started = time.perf_counter()
    bad: dict[int, str] = {}  # 0-based line index -> reason
    rows = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(total, DIM))
    try:
        with _progress(progress, total) as advance:
            done = 0
            while done < total:
                first = done
                lines = read_lines(input_path, first, frozenset(bad))
                try:
                    for batch in client.embed_iter(lines, batch_size, concurrency):
                        rows[done : done + len(batch)] = batch
                        done += len(batch)
                        advance(len(batch))
                except BadText as exc:
                    index = first + exc.index
                    if not skip_bad_lines:
                        raise BadLine(f"{input_path}, line {index + 1}: {exc}") from None
                    bad[index] = str(exc)
        for index in bad:
            rows[index] = np.nan
        rows.flush()
        del rows
        os.replace(tmp, output_path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    seconds = time.perf_counter() - started
    return BulkReport(total, seconds, sorted((i + 1, why) for i, why in bad.items()))


@contextmanager
def _progress(show: bool, total: int) -> Iterator[Callable[[int], None]]:
    """A function that advances a rich progress bar (texts, texts/s, ETA) by n texts; a no-op
    when ``show`` is False."""
    if not show:
        yield lambda n: None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    columns = (
        TextColumn("embedding"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TimeRemainingColumn(),
    )
    started = time.perf_counter()
    from rich.console import Console

    with Progress(*columns, console=Console(stderr=True)) as bar:
        task = bar.add_task("embed", total=total, rate="")

        def advance(n: int) -> None:
            done = bar.tasks[0].completed + n
            rate = done / max(time.perf_counter() - started, 1e-9)
            bar.update(task, advance=n, rate=f"{rate:,.0f} texts/s")

        yield advance
