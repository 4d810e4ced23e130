"""A synthetic click log with a known structure, and the calibration data loader.

No public click log can be downloaded here, so the CTR model is trained on this generator
(numpy only, fully determined by its seed). The generative story:

1. **Items have topics and a popularity.** Each item id ``1..9999`` belongs to one of
   ``num_topics`` latent topics, drawn uniformly (``item_topic``). Popularity is Zipfian (weight
   ``1 / rank**zipf_exponent`` over a random ranking of the catalogue), as item popularity in real
   logs is; every draw of an item below is popularity-weighted.
2. **Users prefer a few topics.** A user prefers 1 to 3 topics (uniform), with weights drawn from
   a flat Dirichlet over them.
3. **History.** A user's history has a length uniform in ``0..63``. Each event is, with
   probability ``1 - history_noise``, an item of one of the user's topics (topic by weight, item
   by popularity within the topic); otherwise any item of the catalogue (exploration, noise).
4. **Candidate.** With probability ``match_rate`` the candidate is drawn like a history event of
   the user's topics; otherwise it is any item of the catalogue.
5. **Click.** ``P(click) = base_ctr + lift * w_u[topic(candidate)]``, where ``w_u`` are the user's
   topic weights (0 for topics the user does not prefer). The model never sees ``w_u``: it has to
   infer the user's taste from the history, and the topics from co-occurrence of items in
   histories. An oracle that knows the topics and scores a candidate by the share of the history
   in its topic reaches a held-out AUC of 0.91 (measured), the ceiling a learned model approaches.

Rows are laid out as the served model expects (``tritonrepo.ctr.features``): the last 63 history
items left-padded with 0, then the candidate.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from tritonrepo.ctr import spec
from tritonrepo.ctr.features import model_row


@dataclass(frozen=True)
class ClickLogConfig:
    """Parameters of the generator (defaults: the build's; see the module docstring)."""

    num_topics: int = 24
    zipf_exponent: float = 1.2
    history_noise: float = 0.1
    match_rate: float = 0.5
    base_ctr: float = 0.02
    lift: float = 0.9
    seed: int = 20261130


@dataclass(frozen=True)
class ClickLog:
    """Samples of the log.

    Attributes:
        histories: per sample, the user's item ids (INT64, any length 0..63, newest last).
        candidates: INT64 ``[n]``, the candidate item shown.
        clicks: FP32 ``[n]``, 1.0 if clicked.
        rows: INT64 ``[n, 64]``, the model input of each sample.
    """

    histories: list[np.ndarray]
    candidates: np.ndarray
    clicks: np.ndarray
    rows: np.ndarray

    def __len__(self) -> int:
        return len(self.candidates)


class ClickLogGenerator:
    """Draws click-log samples; two generators with the same config draw the same log.

    The item→topic assignment and item popularity depend only on ``config.seed``; each
    :meth:`sample` call takes a ``split_seed`` so training, held-out and calibration splits are
    disjoint draws of one world.
    """

    def __init__(self, config: ClickLogConfig | None = None) -> None:
        self.config = config or ClickLogConfig()
        world = np.random.default_rng(self.config.seed)
        item_ids = np.arange(spec.MIN_ITEM_ID, spec.MAX_ITEM_ID + 1)
        self.item_topic = np.full(spec.VOCAB_SIZE, -1)
        self.item_topic[item_ids] = world.integers(0, self.config.num_topics, size=len(item_ids))
        # Popularity: Zipf over a random ranking of the catalogue (weight 1 / rank^s).
        popularity = np.empty(len(item_ids))
        popularity[world.permutation(len(item_ids))] = np.arange(1, len(item_ids) + 1.0) ** (
            -self.config.zipf_exponent
        )
        self._pools = [(item_ids, np.cumsum(popularity) / popularity.sum())]
        for t in range(self.config.num_topics):
            members = self.item_topic[item_ids] == t
            weights = popularity[members]
            self._pools.append((item_ids[members], np.cumsum(weights) / weights.sum()))

    def _draw(self, rng: np.random.Generator, pools: np.ndarray) -> np.ndarray:
        """One popularity-weighted item per entry; pool 0 is the catalogue, t+1 topic t."""
        items = np.empty(len(pools), dtype=np.int64)
        for pool in np.unique(pools):
            where = pools == pool
            ids, cdf = self._pools[pool]
            pick = np.searchsorted(cdf, rng.random(int(where.sum())), side="right")
            items[where] = ids[np.minimum(pick, len(ids) - 1)]
        return items

    def sample(self, n: int, split_seed: int) -> ClickLog:
        """``n`` samples (one user each) drawn with ``split_seed``.

        Returns:
            A :class:`ClickLog` of ``n`` samples.
        """
        c = self.config
        rng = np.random.default_rng([c.seed, split_seed])
        lengths = rng.integers(0, spec.HISTORY_LENGTH + 1, size=n)
        affinity = np.zeros((n, c.num_topics))
        history_pools = np.zeros((n, spec.HISTORY_LENGTH), dtype=np.int64)
        candidate_pools = np.zeros(n, dtype=np.int64)
        for i in range(n):
            topics = rng.choice(c.num_topics, size=rng.integers(1, 4), replace=False)
            weights = rng.dirichlet(np.ones(len(topics)))
            affinity[i, topics] = weights
            history_pools[i] = 1 + rng.choice(topics, size=spec.HISTORY_LENGTH, p=weights)
            candidate_pools[i] = 1 + rng.choice(topics, p=weights)
        history_pools[rng.random(history_pools.shape) < c.history_noise] = 0
        candidate_pools[rng.random(n) >= c.match_rate] = 0
        history_items = self._draw(rng, history_pools.reshape(-1)).reshape(history_pools.shape)
        candidates = self._draw(rng, candidate_pools)
        p_click = c.base_ctr + c.lift * affinity[np.arange(n), self.item_topic[candidates]]
        clicks = (rng.random(n) < p_click).astype(np.float32)
        histories = [history_items[i, : lengths[i]] for i in range(n)]
        pairs = zip(histories, candidates, strict=True)
        rows = np.stack([model_row(history, cand) for history, cand in pairs])
        return ClickLog(histories, candidates, clicks, rows)


# Splits of the build (split_seed values): training, held-out evaluation, calibration.
TRAIN_SPLIT, HELDOUT_SPLIT, CALIBRATION_SPLIT = 1, 2, 3


def calibration_batches(
    num_rows: int = 512,
    batch_size: int = 32,
    source: str = "log",
    generator: ClickLogGenerator | None = None,
) -> Iterator[np.ndarray]:
    """The calibration data loader shared by the INT8 builders (ONNX Runtime, TensorRT).

    Args:
        num_rows: rows in total.
        batch_size: rows per batch (the last batch may be smaller).
        source: ``"log"`` for real held-out click-log rows (the calibration split, disjoint from
            training and evaluation), ``"random"`` for uniformly random item ids and history
            lengths (the comparison baseline of the CTR benchmark).
        generator: the click-log generator (default: the build's).

    Yields:
        INT64 ``[batch, 64]`` model inputs (``input_ids``).

    Raises:
        ValueError: unknown ``source``.
    """
    if source == "log":
        rows = (generator or ClickLogGenerator()).sample(num_rows, CALIBRATION_SPLIT).rows
    elif source == "random":
        rng = np.random.default_rng(CALIBRATION_SPLIT)
        rows = rng.integers(spec.MIN_ITEM_ID, spec.MAX_ITEM_ID + 1, (num_rows, spec.SEQ_LENGTH))
        lengths = rng.integers(0, spec.HISTORY_LENGTH + 1, num_rows)
        for row, length in zip(rows, lengths, strict=True):
            row[: spec.HISTORY_LENGTH - length] = spec.PAD_ID
    else:
        raise ValueError(f"calibration source must be 'log' or 'random', got {source!r}")
    for start in range(0, num_rows, batch_size):
        yield rows[start : start + batch_size].astype(np.int64)
