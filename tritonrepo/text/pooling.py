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


def mean_pool_normalize_torch(token_embeddings, attention_mask):
    """:func:`mean_pool_normalize` in PyTorch, on the tensors' own device (the GPU pooling step).

    Args:
        token_embeddings: ``torch`` FP16 or FP32 ``[batch, seq, hidden]``.
        attention_mask: ``torch`` integer ``[batch, seq]`` on the same device, 1 = real token.

    Returns:
        ``torch`` FP32 ``[batch, hidden]`` on that device; sums are taken in FP32, and the clamp
        values are sentence-transformers' (1e-9 for the token count, 1e-12 for the norm).

    Raises:
        ValueError: the shapes do not agree.
    """
    import torch

    if token_embeddings.ndim != 3 or tuple(attention_mask.shape) != tuple(
        token_embeddings.shape[:2]
    ):
        raise ValueError(
            f"token_embeddings {tuple(token_embeddings.shape)} and attention_mask "
            f"{tuple(attention_mask.shape)} do not agree ([batch, seq, hidden] and [batch, seq])"
        )
    mask = attention_mask.to(device=token_embeddings.device, dtype=torch.float32).unsqueeze(-1)
    summed = (token_embeddings.float() * mask).sum(dim=1)
    mean = summed / mask.sum(dim=1).clamp(min=1e-9)
    return torch.nn.functional.normalize(mean, p=2.0, dim=1, eps=1e-12)
