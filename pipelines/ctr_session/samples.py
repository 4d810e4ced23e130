"""Sample sessions for ctr_session: the health probe's request is session 0's first event."""

import numpy as np

from tritonrepo.ctr import spec


def samples() -> list[dict[str, np.ndarray]]:
    """Three sessions of 1, 5 and 70 events (70 rolls the 63-item window over):
    ``ITEM_ID`` INT64 [events, 1] in -3..10004 (some outside the vocabulary), ``CANDIDATES``
    INT64 [events, n] with n = 3, 8 and 20 per session, some out of vocabulary or repeated.
    Session 0 is the probe: item 5, candidates 11, 222, 3333."""
    rng = np.random.default_rng(11)
    sessions = [{"ITEM_ID": np.array([[5]], np.int64),
                 "CANDIDATES": np.array([[11, 222, 3333]], np.int64)}]  # fmt: skip
    for events, n in ((5, 8), (70, 20)):
        candidates = rng.integers(spec.MIN_ITEM_ID, spec.VOCAB_SIZE, size=(events, n))
        candidates[::3, :4] = [0, spec.VOCAB_SIZE, -7, 42]  # out of vocabulary
        candidates[::3, 4] = candidates[::3, 5]  # a duplicate
        items = rng.integers(-3, spec.VOCAB_SIZE + 5, size=(events, 1))
        sessions.append({"ITEM_ID": items.astype(np.int64),
                         "CANDIDATES": candidates.astype(np.int64)})  # fmt: skip
    return sessions
