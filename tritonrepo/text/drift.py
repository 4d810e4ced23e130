"""text_embedding's input features for drift monitoring (:mod:`tritonrepo.step.drift`).

Per text: ``tokens``, its length in tokens before truncation (special tokens included), and
``truncated``, 1 when that is over the encoder's ``MAX_SEQ_LENGTH`` (256) and the encoder reads
only the start, else 0. A corpus that grows longer, or starts to be cut, shows here first.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from tritonrepo.step.drift import FeatureContext
from tritonrepo.text import spec

TOKENIZER = Path(spec.TOKENIZE_MODEL) / "1" / "tokenizer.json"  # in the model repository


@lru_cache(maxsize=4)
def _tokenizer(path: str) -> Tokenizer:
    """The tokenizer.json at ``path``, without truncation or padding (counts every token)."""
    tokenizer = Tokenizer.from_file(path)
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def token_counts(texts: list[str], repository: Path) -> np.ndarray:
    """Tokens per text, untruncated (INT64 ``[len(texts)]``), with the tokenizer the
    repository's text_embedding_tokenize serves."""
    encodings = _tokenizer(str(repository / TOKENIZER)).encode_batch(texts)
    return np.array([len(e.ids) for e in encodings], dtype=np.int64)


def features(inputs: Mapping[str, np.ndarray], context: FeatureContext) -> dict[str, np.ndarray]:
    """``tokens`` and ``truncated`` per text of ``TEXT`` (BYTES ``[b, 1]``, UTF-8; invalid
    bytes are replaced, the step has refused such requests already)."""
    texts = [
        v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
        for v in np.asarray(inputs["TEXT"]).reshape(-1)
    ]
    tokens = token_counts(texts, context.repository)
    return {"tokens": tokens, "truncated": (tokens > spec.MAX_SEQ_LENGTH).astype(np.int64)}
