"""CUDA-graph buckets (``tritonrepo.runners.cuda_graphs``): which captured graph a call of
rows x positions replays, and how config parameters give the grid. No GPU needed."""

from __future__ import annotations

import pytest

from tritonrepo.runners.cuda_graphs import Grid, grid_from_parameters, parse_sizes

GRID = Grid(rows=(1, 2, 4, 8), positions=(16, 32, 64))


@pytest.mark.parametrize(
    ("rows", "positions", "bucket"),
    [
        (1, 1, (1, 16)),
        (1, 16, (1, 16)),
        (3, 17, (4, 32)),
        (8, 64, (8, 64)),
        (9, 10, None),  # more rows than the grid: eager
        (2, 65, None),  # longer than the grid: eager
    ],
)
def test_a_call_runs_in_the_smallest_bucket_that_holds_it(rows, positions, bucket):
    assert GRID.bucket(rows, positions) == bucket


def test_a_grid_without_positions_buckets_rows_only():
    assert Grid(rows=(32, 64)).bucket(40, None) == (64, None)
    assert Grid(rows=(32, 64)).bucket(65, None) is None


def test_parameters_parse_sorted_and_deduplicated():
    assert parse_sizes("64, 1,2,2", "cuda_graph_rows") == (1, 2, 64)
    assert grid_from_parameters("4,1", "") == Grid((1, 4), ())
    for bad in ("1,x", "0,2", "-4"):
        with pytest.raises(ValueError, match="cuda_graph_rows must be comma-separated"):
            grid_from_parameters(bad, "16")
