"""The Python-backend steps of the ``text_embedding`` ensemble.

``model_repository/text_embedding_tokenize/1/model.py`` and
``model_repository/text_embedding_normalize/1/model.py`` are one-line subclasses of these.
"""

from __future__ import annotations

import numpy as np

from tritonrepo.step.errors import InvalidRequest
from tritonrepo.step.parameters import REQUIRED, Parameter
from tritonrepo.step.python_step import Outputs, PythonStep
from tritonrepo.text import spec
from tritonrepo.text.pooling import l2_normalize
from tritonrepo.text.tokenization import TextTokenizer, decode_texts


class TokenizeStep(PythonStep):
    """``TEXT`` BYTES ``[batch, 1]`` → ``input_ids``, ``attention_mask`` INT64 ``[batch, seq]``
    and ``token_count`` INT32 ``[batch, 1]`` (tokens the encoder reads per text, special tokens
    included, after truncation to ``max_seq_length``: the usage a caller is billed for).

    All requests of one dynamic batch are tokenized together and padded to the longest item of
    that batch, so their outputs share one ``seq`` and the encoder's dynamic batcher (which only
    joins requests of equal shape, as the TensorRT backend needs) can run them as one batch.
    Config parameters: :attr:`PARAMETERS`.

    Raises (per request, as its error): InvalidRequest for an empty tensor, a text over
    ``max_text_bytes`` (checked before decoding and tokenizing) or one that is not UTF-8.
    """

    PARAMETERS = (
        Parameter(
            "tokenizer_file",
            "str",
            "tokenizer.json",
            "file",
            "tokenizer.json in the version folder",
        ),
        Parameter(
            "max_seq_length",
            "int",
            REQUIRED,
            "tokens",
            "tokens kept per text, special tokens included (TextTokenizer)",
            minimum=2,
        ),
        Parameter(
            "max_text_bytes",
            "int",
            spec.MAX_TEXT_BYTES,
            "bytes",
            "UTF-8 bytes per text; a longer text is refused before it is decoded",
            minimum=1,
        ),
    )

    def setup(self) -> None:
        self.tokenizer = TextTokenizer(
            self.artifact(self.settings["tokenizer_file"]), self.settings["max_seq_length"]
        )
        self.max_text_bytes = self.settings["max_text_bytes"]

    def prepare(self, inputs: dict[str, np.ndarray]) -> list[str]:
        return decode_texts(inputs["TEXT"], "TEXT", max_bytes=self.max_text_bytes)

    def run(self, items: list[list[str]]) -> list[Outputs | Exception]:
        ids, mask = self.tokenizer.encode([text for texts in items for text in texts])
        results: list[Outputs | Exception] = []
        start = 0
        for texts in items:
            stop = start + len(texts)
            results.append(
                {
                    "input_ids": ids[start:stop],
                    "attention_mask": mask[start:stop],
                    "token_count": mask[start:stop].sum(axis=1, dtype=np.int32).reshape(-1, 1),
                }
            )
            start = stop
        return results


class NormalizeStep(PythonStep):
    """``sentence_embedding`` FP32 ``[batch, hidden]`` (the encoder's masked mean) →
    ``EMBEDDING`` FP32 ``[batch, hidden]``, each row L2-normalised
    (:func:`tritonrepo.text.pooling.l2_normalize`); ``token_count`` INT32 ``[batch, 1]``, when
    given (from :class:`TokenizeStep`), is passed through as ``TOKENS``.

    Raises (per request, as its error): InvalidRequest for an input that is not
    ``[batch, hidden]`` or holds a NaN or infinity (an encoder fault must not reach the caller
    as a vector of NaNs).
    """

    def prepare(self, inputs: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray | None]:
        pooled = inputs[spec.ENCODER_OUTPUT]
        if pooled.ndim != 2:
            raise InvalidRequest(
                f"{spec.ENCODER_OUTPUT} must be [batch, hidden], got {list(pooled.shape)}"
            )
        if not np.isfinite(pooled).all():
            raise InvalidRequest(f"{spec.ENCODER_OUTPUT} holds NaN or infinite values")
        tokens = inputs.get("token_count")
        return pooled, None if tokens is None else np.asarray(tokens, np.int32).reshape(-1, 1)

    def run(self, items: list[tuple[np.ndarray, np.ndarray | None]]) -> list[Outputs | Exception]:
        normalized = l2_normalize(np.concatenate([pooled for pooled, _ in items]))
        sizes = np.cumsum([len(pooled) for pooled, _ in items])[:-1]
        return [
            {"EMBEDDING": part} | ({} if tokens is None else {"TOKENS": tokens})
            for part, (_, tokens) in zip(np.split(normalized, sizes), items, strict=True)
        ]
