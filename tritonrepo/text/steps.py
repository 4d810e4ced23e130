"""The Python-backend steps of the ``text_embedding`` ensemble.

``model_repository/text_embedding_tokenize/1/model.py`` and
``model_repository/text_embedding_pool/1/model.py`` are one-line subclasses of these.
"""

from __future__ import annotations

import numpy as np

from tritonrepo.errors import InvalidRequest
from tritonrepo.text.pooling import mean_pool_normalize
from tritonrepo.text.tokenization import TextTokenizer, decode_texts
from tritonrepo.triton_step import Outputs, PythonStep


class TokenizeStep(PythonStep):
    """``TEXT`` BYTES ``[batch, 1]`` → ``input_ids``, ``attention_mask`` INT64 ``[batch, seq]``.

    All requests of one dynamic batch are tokenized together and padded to the longest item of
    that batch, so their outputs share one ``seq`` and the encoder's dynamic batcher (which only
    joins requests of equal shape, as the TensorRT backend needs) can run them as one batch.
    Config parameters: ``tokenizer_file`` (in the version folder), ``max_seq_length``.
    """

    def setup(self) -> None:
        self.tokenizer = TextTokenizer(
            self.artifact(self.parameter("tokenizer_file", "tokenizer.json")),
            int(self.parameter("max_seq_length")),
        )

    def prepare(self, inputs: dict[str, np.ndarray]) -> list[str]:
        return decode_texts(inputs["TEXT"], "TEXT")

    def run(self, items: list[list[str]]) -> list[Outputs | Exception]:
        ids, mask = self.tokenizer.encode([text for texts in items for text in texts])
        results: list[Outputs | Exception] = []
        start = 0
        for texts in items:
            stop = start + len(texts)
            results.append({"input_ids": ids[start:stop], "attention_mask": mask[start:stop]})
            start = stop
        return results


class PoolStep(PythonStep):
    """``token_embeddings`` FP32 ``[batch, seq, hidden]`` + ``attention_mask`` INT64
    ``[batch, seq]`` → ``EMBEDDING`` FP32 ``[batch, hidden]`` (masked mean, L2-normalised)."""

    def prepare(self, inputs: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        embeddings, mask = inputs["token_embeddings"], inputs["attention_mask"]
        if embeddings.shape[:2] != mask.shape:
            raise InvalidRequest(
                f"token_embeddings {list(embeddings.shape)} and attention_mask "
                f"{list(mask.shape)} disagree on [batch, seq]"
            )
        return embeddings, mask

    def run(self, items: list[tuple[np.ndarray, np.ndarray]]) -> list[Outputs | Exception]:
        return [{"EMBEDDING": mean_pool_normalize(emb, mask)} for emb, mask in items]
