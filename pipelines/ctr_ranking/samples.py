"""Sample requests for ctr_ranking: the health probe's request is the first (the smallest)."""

import numpy as np

from tritonrepo.ctr import spec


def samples() -> dict[str, np.ndarray]:
    """Eight users, one request each (``max_batch_size = 0``: row i is request i, without a
    batch dim): ``HISTORY`` INT64 [8, 3] item ids, ``CANDIDATES`` INT64 [8, 3] ids to rank,
    ``TOP_K`` INT32 [8, 1] (2). Ids are in 1..``spec.VOCAB_SIZE - 1``; row 0 is the probe
    request (3 candidates, the top 2 back)."""
    rng = np.random.default_rng(0)
    history = rng.integers(1, spec.VOCAB_SIZE, size=(8, 3), dtype=np.int64)
    candidates = rng.integers(1, spec.VOCAB_SIZE, size=(8, 3), dtype=np.int64)
    history[0], candidates[0] = [5, 50, 500], [11, 222, 3333]
    return {"HISTORY": history, "CANDIDATES": candidates, "TOP_K": np.full((8, 1), 2, np.int32)}
