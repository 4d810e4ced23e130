"""Turn a batch of UTF-8 byte strings into padded BERT inputs with HF ``tokenizers``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from tritonrepo.step.errors import InvalidRequest, OverLimit
from tritonrepo.text import spec


def decode_texts(values: np.ndarray, name: str = "TEXT", max_bytes: int | None = None) -> list[str]:
    """Decode a BYTES tensor (numpy object array of ``bytes``, any shape) into Python strings.

    Every element's size is checked before it is decoded (and so before anything tokenizes it).

    Args:
        values: object array as the Python backend delivers a ``TYPE_STRING`` tensor, e.g. shape
            ``[batch, 1]``; each element is ``bytes`` (or ``str``, measured as UTF-8).
        name: tensor name used in error messages.
        max_bytes: largest element accepted, in bytes of UTF-8 (the tokenizer's
            ``max_text_bytes`` parameter); None accepts any size.

    Returns:
        ``batch`` strings, flattened in C order.

    Raises:
        InvalidRequest: the tensor holds no element, or an element is not valid UTF-8 (the
            message gives the index and byte offset). The first bad element in C order is
            reported.
        OverLimit (an InvalidRequest): an element is larger than ``max_bytes`` (the message
            gives the index, its size and the limit, in bytes).
    """
    flat = np.asarray(values, dtype=object).reshape(-1)
    if flat.size == 0:
        raise InvalidRequest(f"{name} is empty: send at least one string (shape [batch, 1])")
    texts = []
    for i, item in enumerate(flat):
        if isinstance(item, str):
            raw = item.encode("utf-8", "surrogatepass")
        elif isinstance(item, (bytes, bytearray, memoryview)):
            raw = bytes(item)
        else:
            raise InvalidRequest(f"{name}[{i}] is a {type(item).__name__}, not a string")
        if max_bytes is not None and len(raw) > max_bytes:
            raise OverLimit(
                f"{name}[{i}] is {len(raw)} bytes, over the limit of {max_bytes} bytes per text "
                f"(parameter max_text_bytes); only a text's first {spec.MAX_SEQ_LENGTH} tokens "
                "(about 1-2 KB) are embedded, so cut longer texts before sending them"
            )
        if isinstance(item, str):
            texts.append(item)
            continue
        try:
            texts.append(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise InvalidRequest(
                f"{name}[{i}] is not valid UTF-8 (byte 0x{raw[exc.start]:02x} at offset "
                f"{exc.start}); send UTF-8 encoded text"
            ) from None
    return texts


class TextTokenizer:
    """A ``tokenizer.json`` (HF ``tokenizers``) with truncation and pad-to-longest batching.

    Args:
        tokenizer_file: the model's own ``tokenizer.json``.
        max_seq_length: tokens kept per text, special tokens included; 256 for all-MiniLM-L6-v2
            (its ``sentence_bert_config.json``), which is what sentence-transformers truncates to.
    """

    def __init__(self, tokenizer_file: str | Path, max_seq_length: int) -> None:
        if max_seq_length < 2:
            raise ValueError(f"max_seq_length must be >= 2, got {max_seq_length}")
        self.tokenizer = Tokenizer.from_file(str(tokenizer_file))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=max_seq_length)
        self.max_seq_length = max_seq_length
        self.pad_id = self.tokenizer.padding["pad_id"] if self.tokenizer.padding else 0

    def encode(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Tokenize ``texts`` and right-pad to the longest of them (not to ``max_seq_length``).

        Returns:
            ``(input_ids, attention_mask)``, both INT64 ``[len(texts), longest]``; padding
            positions hold the pad id (0 for BERT) and mask 0.

        Raises:
            ValueError: ``texts`` is empty.
        """
        if not texts:
            raise ValueError("encode() needs at least one text")
        encodings = self.tokenizer.encode_batch(list(texts))
        longest = max(len(e.ids) for e in encodings)
        ids = np.full((len(texts), longest), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(texts), longest), dtype=np.int64)
        for row, enc in enumerate(encodings):
            ids[row, : len(enc.ids)] = enc.ids
            mask[row, : len(enc.ids)] = enc.attention_mask
        return ids, mask
