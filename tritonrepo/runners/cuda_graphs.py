"""CUDA graphs of an exported program over a grid of input shapes (``backends/torch_python``).

An eager ``torch.export`` program pays Python and kernel-launch cost for every operator of every
call: all-MiniLM-L6-v2 is about 400 operators, about 5 ms per forward pass on an H200 whatever
the batch, which is most of a one-text request's latency. A CUDA graph replays the recorded
kernels with one launch. Graphs need static shapes, so one graph is captured per bucket of a
grid (rows × sequence length) and a call runs in the smallest bucket that holds it: inputs are
zero-padded into the bucket's static buffers (padding rows and positions have attention mask 0,
so they change no real row: masked attention and masked mean pooling ignore them), the graph is
replayed, and the real rows are copied out. Calls larger than the grid run eagerly: there the
kernels' own time dominates the launch cost.

All graphs share one memory pool and replay on one stream, one at a time (PyTorch's CUDA
graphs notes, "Graph memory management": sharing a pool across captures is safe when the graphs
never run concurrently). Sources: ``torch.cuda.CUDAGraph``, ``torch.cuda.graph``.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from tritonrepo.step import parameters

Feed = dict[str, torch.Tensor]


@dataclass(frozen=True)
class Grid:
    """The bucket sizes: ``rows`` (batch axis) and, for inputs with a sequence axis,
    ``positions`` (axis 1); both ascending."""

    rows: tuple[int, ...]
    positions: tuple[int, ...] = ()

    def bucket(self, rows: int, positions: int | None) -> tuple[int, int | None] | None:
        """The smallest bucket holding ``rows`` × ``positions``, or None if none does."""
        r = bisect.bisect_left(self.rows, rows)
        if r == len(self.rows):
            return None
        if positions is None or not self.positions:
            return self.rows[r], None
        p = bisect.bisect_left(self.positions, positions)
        if p == len(self.positions):
            return None
        return self.rows[r], self.positions[p]


def parse_sizes(text: str, key: str) -> tuple[int, ...]:
    """``"1,2,4"`` → ``(1, 2, 4)``, sorted and deduplicated
    (:func:`tritonrepo.step.parameters.parse_sizes`; a served model's ``cuda_graph_rows`` and
    ``cuda_graph_positions`` are parsed by its declaration, ``backends/torch_python``).

    Raises:
        ValueError: an entry is not a positive integer (the message names ``key``).
    """
    try:
        return parameters.parse_sizes(text)
    except ValueError:
        raise ValueError(f"{key} must be comma-separated positive integers, got {text!r}") from None


def grid_from_parameters(rows: str, positions: str) -> Grid:
    """The ``cuda_graph_rows`` / ``cuda_graph_positions`` config parameters as a :class:`Grid`
    (``positions`` may be empty: a model without a sequence axis).

    Raises:
        ValueError: a value is not comma-separated positive integers (naming the key).
    """
    return Grid(
        parse_sizes(rows, "cuda_graph_rows"),
        parse_sizes(positions, "cuda_graph_positions") if positions else (),
    )


class GraphedProgram:
    """``forward`` replayed from CUDA graphs captured over ``grid``.

    Args:
        forward: the program's forward, positional tensors in ``input_names`` order, returning
            a tuple of output tensors.
        input_names: the program's inputs, in order.
        sequence_inputs: inputs whose axis 1 is a padded sequence (bucketed by ``grid.positions``).
        examples: per input, a tensor on the device whose dtype and trailing shape (after axis 0,
            or after axis 1 for sequence inputs) the static buffers take.
        grid: the buckets to capture.

    Raises:
        RuntimeError: a capture failed (e.g. the program synchronises with the host); the
            caller runs eagerly instead.
    """

    def __init__(
        self,
        forward: Callable[..., tuple[torch.Tensor, ...]],
        input_names: Sequence[str],
        sequence_inputs: Sequence[str],
        examples: Feed,
        grid: Grid,
    ) -> None:
        self.forward = forward
        self.input_names = list(input_names)
        self.sequence_inputs = set(sequence_inputs)
        self.grid = grid
        self.pool = torch.cuda.graph_pool_handle()
        self.graphs: dict[tuple[int, int | None], tuple[torch.cuda.CUDAGraph, Feed, tuple]] = {}
        positions = grid.positions if self.sequence_inputs else (None,)
        stream = torch.cuda.Stream()
        # Capture largest first, so the shared pool is sized once by the largest bucket.
        for rows in sorted(grid.rows, reverse=True):
            for length in sorted(positions, key=lambda p: -(p or 0)):
                self._capture(rows, length, examples, stream)
        torch.cuda.synchronize()

    def _capture(self, rows: int, length: int | None, examples: Feed, stream) -> None:
        static: Feed = {}
        for name in self.input_names:
            example = examples[name]
            if name in self.sequence_inputs:
                shape = (rows, length, *example.shape[2:])
            else:
                shape = (rows, *example.shape[1:])
            static[name] = torch.zeros(shape, dtype=example.dtype, device=example.device)
        args = [static[n] for n in self.input_names]
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            self.forward(*args)  # warm-up: lazy initialisation must not happen in the capture
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool, stream=stream):
            outputs = self.forward(*args)
        self.graphs[(rows, length)] = (graph, static, outputs)

    def __call__(self, feed: Feed) -> tuple[torch.Tensor, ...] | None:
        """Run ``feed`` (tensors ``[rows, ...]`` on the device) in its bucket.

        Returns:
            The outputs' first ``rows`` rows (views of the graph's static outputs: valid until
            the next call), or None when no bucket holds ``feed`` (run it eagerly).
        """
        first = feed[self.input_names[0]]
        rows = first.shape[0]
        length = (
            max(feed[n].shape[1] for n in self.sequence_inputs) if self.sequence_inputs else None
        )
        key = self.grid.bucket(rows, length)
        if key is None or key not in self.graphs:
            return None
        graph, static, outputs = self.graphs[key]
        for name in self.input_names:
            buffer, value = static[name], feed[name]
            buffer.zero_()
            if name in self.sequence_inputs:
                buffer[:rows, : value.shape[1]].copy_(value, non_blocking=True)
            else:
                buffer[:rows].copy_(value, non_blocking=True)
        graph.replay()
        return tuple(out[:rows] for out in outputs)
