"""The Python-backend steps of the ``text_embedding`` ensemble.

``model_repository/text_embedding_tokenize/1/model.py`` and
``model_repository/text_embedding_pool/1/model.py`` are one-line subclasses of these.
"""

from __future__ import annotations

import numpy as np

from tritonrepo.errors import InvalidRequest
from tritonrepo.text import spec
from tritonrepo.text.pooling import mean_pool_normalize, mean_pool_normalize_torch
from tritonrepo.text.tokenization import TextTokenizer, decode_texts
from tritonrepo.triton_step import Outputs, PythonStep


class TokenizeStep(PythonStep):
    """``TEXT`` BYTES ``[batch, 1]`` → ``input_ids``, ``attention_mask`` INT64 ``[batch, seq]``.

    All requests of one dynamic batch are tokenized together and padded to the longest item of
    that batch, so their outputs share one ``seq`` and the encoder's dynamic batcher (which only
    joins requests of equal shape, as the TensorRT backend needs) can run them as one batch.
    Config parameters: ``tokenizer_file`` (in the version folder), ``max_seq_length``,
    ``max_text_bytes`` (bytes of UTF-8 per text, default ``spec.MAX_TEXT_BYTES`` = 64 KiB).

    Raises (per request, as its error): InvalidRequest for an empty tensor, a text over
    ``max_text_bytes`` (checked before decoding and tokenizing) or one that is not UTF-8.
    """

    def setup(self) -> None:
        self.tokenizer = TextTokenizer(
            self.artifact(self.parameter("tokenizer_file", "tokenizer.json")),
            int(self.parameter("max_seq_length")),
        )
        self.max_text_bytes = int(self.parameter("max_text_bytes", str(spec.MAX_TEXT_BYTES)))
        if self.max_text_bytes <= 0:
            raise ValueError(f"max_text_bytes must be > 0, got {self.max_text_bytes}")

    def prepare(self, inputs: dict[str, np.ndarray]) -> list[str]:
        return decode_texts(inputs["TEXT"], "TEXT", max_bytes=self.max_text_bytes)

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
    """``token_embeddings`` FP32 or FP16 ``[batch, seq, hidden]`` + ``attention_mask`` INT64
    ``[batch, seq]`` → ``EMBEDDING`` FP32 ``[batch, hidden]`` (masked mean, L2-normalised).

    A ``KIND_GPU`` instance pools with PyTorch on its GPU, reading the encoder's output there
    through DLPack (the ``torch_gpu`` config set); a ``KIND_CPU`` instance uses numpy.
    """

    def setup(self) -> None:
        if self.device != "cpu":
            self.tensor_library = "torch"

    def prepare(self, inputs: dict) -> tuple:
        embeddings, mask = inputs["token_embeddings"], inputs["attention_mask"]
        if embeddings.shape[:2] != mask.shape:
            raise InvalidRequest(
                f"token_embeddings {list(embeddings.shape)} and attention_mask "
                f"{list(mask.shape)} disagree on [batch, seq]"
            )
        return embeddings, mask

    def run(self, items: list[tuple]) -> list[Outputs | Exception]:
        if self.tensor_library == "torch":
            return pool_together_torch(items)
        return [{"EMBEDDING": mean_pool_normalize(emb, mask)} for emb, mask in items]


def pool_together_torch(items: list[tuple]) -> list[Outputs | Exception]:
    """Pool every request of a batch in one pass on the GPU (a few kernels, not a few per
    request): zero-pad each ``[b_i, seq_i, hidden]`` / ``[b_i, seq_i]`` pair to the longest
    ``seq``, pool, and split the FP32 ``[sum b_i, hidden]`` result back per request."""
    import torch

    longest = max(emb.shape[1] for emb, _ in items)
    pad = torch.nn.functional.pad
    embeddings = torch.cat([pad(emb, (0, 0, 0, longest - emb.shape[1])) for emb, _ in items])
    masks = torch.cat(
        [pad(mask.to(emb.device), (0, longest - mask.shape[1])) for emb, mask in items]
    )
    pooled = mean_pool_normalize_torch(embeddings, masks)
    sizes = [emb.shape[0] for emb, _ in items]
    return [{"EMBEDDING": part} for part in torch.split(pooled, sizes)]
