"""Client of the ``text_embedding`` ensemble."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tritonrepo_client.connection import ModelClient


def cosine_similarity_matrix(vectors: np.ndarray) -> np.ndarray:
    """Cosine similarity of every pair of rows: FP32 ``[n, d]`` → FP32 ``[n, n]``.

    Rows of zero norm get similarity 0 with everything.
    """
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    unit = vectors / np.where(norms == 0, 1, norms)
    return (unit @ unit.T).astype(np.float32)


class EmbeddingClient(ModelClient):
    """Sentence embeddings from the ``text_embedding`` ensemble (arguments: :class:`ModelClient`;
    ``model`` defaults to ``text_embedding``)."""

    DEFAULT_MODEL = "text_embedding"
    _max_batch_size: int | None = None

    @property
    def max_batch_size(self) -> int:
        """The ensemble's ``max_batch_size`` (read from the server once)."""
        if self._max_batch_size is None:
            self._max_batch_size = int(self.connection.model_config(self.model)["max_batch_size"])
        return self._max_batch_size

    def embed(
        self,
        texts: Sequence[str | bytes],
        model_version: str = "",
        timeout_s: float | None = None,
    ) -> np.ndarray:
        """Embed ``texts``; FP32 ``[len(texts), 384]``, rows L2-normalised.

        More texts than the ensemble's ``max_batch_size`` are sent as several requests, each
        with the deadline ``timeout_s`` seconds (default: the client's).

        Raises:
            ValueError: ``texts`` is empty.
            ServerUnreachable: no server at the URL.
            ClientError: the server rejected the request (message from Triton).
        """
        if len(texts) == 0:
            raise ValueError("embed() needs at least one text")
        encoded = [t.encode("utf-8") if isinstance(t, str) else bytes(t) for t in texts]
        chunk = self.max_batch_size
        parts = []
        for start in range(0, len(encoded), chunk):
            batch = np.array(encoded[start : start + chunk], dtype=object).reshape(-1, 1)
            result = self.connection.infer(
                self.model,
                {"TEXT": batch},
                ["EMBEDDING"],
                model_version=model_version,
                timeout_s=timeout_s,
            )
            parts.append(result["EMBEDDING"])
        return np.concatenate(parts, axis=0)
