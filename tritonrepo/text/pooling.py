"""Sentence-embedding pooling: attention-masked mean, then L2 normalisation.

The mean runs inside the encoder's exported graph (ONNX, TensorRT plan, ``torch.export``
program: :func:`mean_pool_torch`), so the encoder hands one ``[batch, hidden]`` row per text to
the next step instead of ``[batch, seq, hidden]``; the normalisation is the ensemble's last
step (:func:`l2_normalize`). Together they are sentence-transformers' ``Pooling(
pooling_mode_mean_tokens=True)`` and ``Normalize`` modules (``encode(normalize_embeddings=True)``).
"""

from __future__ import annotations

import numpy as np

# Clamp values of sentence-transformers' Pooling (token count) and of
# torch.nn.functional.normalize (the norm), which its Normalize module calls.
MIN_TOKENS = 1e-9
MIN_NORM = 1e-12


def mean_pool(token_embeddings: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
    """Mean of the token embeddings where ``attention_mask`` is 1 (sum over masked tokens
    divided by ``max(mask.sum(), 1e-9)``).

    Args:
        token_embeddings: FP32 ``[batch, seq, hidden]``.
        attention_mask: integer ``[batch, seq]``, 1 for real tokens and 0 for padding.

    Returns:
        FP32 ``[batch, hidden]`` (all zeros for a row with no token).

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
    return (summed / np.maximum(mask.sum(axis=1), MIN_TOKENS)).astype(np.float32)


def l2_normalize(embeddings: np.ndarray) -> np.ndarray:
    """Each row divided by ``max(||row||_2, 1e-12)``.

    Args:
        embeddings: float ``[batch, hidden]``.

    Returns:
        FP32 ``[batch, hidden]``, each row of unit L2 norm (or all zeros).

    Raises:
        ValueError: not two-dimensional.
    """
    if embeddings.ndim != 2:
        raise ValueError(f"embeddings must be [batch, hidden], got {list(embeddings.shape)}")
    values = embeddings.astype(np.float32)
    norms = np.maximum(np.linalg.norm(values, axis=1, keepdims=True), MIN_NORM)
    return (values / norms).astype(np.float32)


def mean_pool_normalize(token_embeddings: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
    """:func:`mean_pool` then :func:`l2_normalize`: what the ``text_embedding`` ensemble
    returns, from token embeddings FP32 ``[batch, seq, hidden]`` and their INT
    ``[batch, seq]`` mask; FP32 ``[batch, hidden]``.

    Raises:
        ValueError: the shapes do not agree.
    """
    return l2_normalize(mean_pool(token_embeddings, attention_mask))


def mean_pool_torch(token_embeddings, attention_mask):
    """:func:`mean_pool` in PyTorch, for the encoders' exported graphs.

    Args:
        token_embeddings: ``torch`` FP16 or FP32 ``[batch, seq, hidden]``.
        attention_mask: ``torch`` integer ``[batch, seq]`` on the same device, 1 = real token.

    Returns:
        ``torch`` FP32 ``[batch, hidden]``; sums are taken in FP32 whatever the encoder's
        precision, so an FP16 encoder loses no accuracy in the mean.
    """
    import torch

    mask = attention_mask.to(dtype=torch.float32).unsqueeze(-1)
    summed = (token_embeddings.float() * mask).sum(dim=1)
    return summed / mask.sum(dim=1).clamp(min=MIN_TOKENS)
