"""Sentence-embedding pooling: attention-masked mean + L2 normalisation."""

from __future__ import annotations

import numpy as np


def mean_pool_normalize(token_embeddings: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
    """Mean of the token embeddings where ``attention_mask`` is 1, then L2-normalised.

    This is sentence-transformers' ``Pooling(pooling_mode_mean_tokens=True)`` followed by its
    ``Normalize`` module (``encode(normalize_embeddings=True)``): the sum of masked token vectors
    divided by ``max(mask.sum(), 1e-9)``, then ``x / max(||x||_2, 1e-12)`` (the clamp values are
    those of sentence-transformers and ``torch.nn.functional.normalize``).

    Args:
        token_embeddings: FP32 ``[batch, seq, hidden]``.
        attention_mask: integer ``[batch, seq]``, 1 for real tokens and 0 for padding.

    Returns:
        FP32 ``[batch, hidden]``, each row of unit L2 norm (or all zeros if it has no token).

    Raises:
        ValueError: the shapes do not agree.
    """
    if token_embeddings.ndim != 3 or attention_mask.shape != token_embeddings.shape[:2]:
        raise ValueError(
            f"token_embeddings {token_embeddings.shape} and attention_mask "
            f"{attention_mask.shape} do not agree ([batch, seq, hidden] and [batch, seq])"
        )
    mask = attention_mask.astype(np.float32)[:, :, None]
    summed = (token_embeddings.astype(np.float32) * mask).sum(axis=1)
    counts = np.maximum(mask.sum(axis=1), 1e-9)
    mean = summed / counts
    norms = np.maximum(np.linalg.norm(mean, axis=1, keepdims=True), 1e-12)
    return (mean / norms).astype(np.float32)
