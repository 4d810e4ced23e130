"""Tokenization and pooling against sentence-transformers' own modules (no server)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.sentences import SENTENCES
from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.step.errors import InvalidRequest
from tritonrepo.text import spec
from tritonrepo.text.pooling import l2_normalize, mean_pool, mean_pool_normalize, mean_pool_torch
from tritonrepo.text.tokenization import TextTokenizer, decode_texts
from tritonrepo_format.configs import load_config


@pytest.fixture(scope="module")
def tokenizer() -> TextTokenizer:
    return TextTokenizer(spec.source_model_dir() / "tokenizer.json", spec.MAX_SEQ_LENGTH)


def test_max_seq_length_is_the_reference_one(reference_model):
    cfg = load_config(MODEL_REPOSITORY / spec.TOKENIZE_MODEL / "config.pbtxt")
    assert int(cfg.parameters["max_seq_length"].string_value) == reference_model.max_seq_length
    assert reference_model.max_seq_length == spec.MAX_SEQ_LENGTH


def test_tokens_match_reference_padded_to_longest(tokenizer, reference_model):
    ids, mask = tokenizer.encode(SENTENCES)
    ref = reference_model.tokenize(SENTENCES)  # pads to longest, truncates at max_seq_length
    assert ids.dtype == np.int64 and mask.dtype == np.int64
    assert ids.shape == tuple(ref["input_ids"].shape)
    assert ids.shape[1] == spec.MAX_SEQ_LENGTH  # the long paragraph is truncated, not dropped
    np.testing.assert_array_equal(ids, ref["input_ids"].numpy())
    np.testing.assert_array_equal(mask, ref["attention_mask"].numpy())


def test_short_batch_is_not_padded_to_max(tokenizer):
    ids, mask = tokenizer.encode(["Hi", "Hello there"])
    assert ids.shape == (2, 4)  # [CLS] hello there [SEP]
    assert mask.tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]]


def test_decode_texts_errors():
    with pytest.raises(InvalidRequest, match="empty"):
        decode_texts(np.zeros((0, 1), dtype=object))
    bad_utf8 = r"TEXT\[2\] is not valid UTF-8 \(byte 0xc3 at offset 1"
    with pytest.raises(InvalidRequest, match=bad_utf8):
        decode_texts(np.array([[b"a"], [b"b"], [b"x\xc3("]], dtype=object))
    assert decode_texts(np.array([["é".encode()], [b""]], dtype=object)) == ["é", ""]


def test_decode_texts_size_limit_is_checked_first_and_named():
    limit = 16
    at_limit = np.array([[b"a" * limit], ["é" * (limit // 2)]], dtype=object)
    assert decode_texts(at_limit, max_bytes=limit) == ["a" * limit, "é" * (limit // 2)]
    # one byte over, invalid UTF-8 too: the size is reported (checked before decoding)
    over = np.array([[b"ok"], [b"\xff" * (limit + 1)]], dtype=object)
    with pytest.raises(
        InvalidRequest, match=rf"TEXT\[1\] is {limit + 1} bytes, over the limit of {limit} bytes"
    ):
        decode_texts(over, max_bytes=limit)
    # str elements are measured in UTF-8 bytes, not characters
    with pytest.raises(InvalidRequest, match=rf"TEXT\[0\] is {limit + 2} bytes"):
        decode_texts(np.array([["é" * (limit // 2 + 1)]], dtype=object), max_bytes=limit)
    with pytest.raises(InvalidRequest, match=r"TEXT\[0\] is a int, not a string"):
        decode_texts(np.array([[7]], dtype=object), max_bytes=limit)
    assert decode_texts(np.array([[b"x" * 10 * limit]], dtype=object)) == ["x" * 10 * limit]


def test_pooling_matches_sentence_transformers_modules():
    from sentence_transformers.models import Normalize, Pooling

    rng = np.random.default_rng(0)
    emb = rng.normal(size=(5, 9, spec.HIDDEN_SIZE)).astype(np.float32)
    lengths = [9, 1, 4, 7, 2]
    mask = (np.arange(9)[None, :] < np.array(lengths)[:, None]).astype(np.int64)
    features = {
        "token_embeddings": torch.from_numpy(emb),
        "attention_mask": torch.from_numpy(mask),
    }
    pooled = Pooling(spec.HIDDEN_SIZE, pooling_mode="mean")(dict(features))
    np.testing.assert_allclose(
        mean_pool(emb, mask), pooled["sentence_embedding"].numpy(), atol=1e-6
    )
    np.testing.assert_allclose(
        mean_pool_torch(torch.from_numpy(emb).half(), torch.from_numpy(mask)).numpy(),
        Pooling(spec.HIDDEN_SIZE, pooling_mode="mean")(
            {
                "token_embeddings": torch.from_numpy(emb).half().float(),
                "attention_mask": features["attention_mask"],
            }
        )["sentence_embedding"].numpy(),
        atol=1e-6,
    )
    expected = Normalize()(pooled)["sentence_embedding"].numpy()
    np.testing.assert_allclose(mean_pool_normalize(emb, mask), expected, atol=1e-6)
    np.testing.assert_allclose(l2_normalize(mean_pool(emb, mask)), expected, atol=1e-6)


def test_pooling_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="do not agree"):
        mean_pool_normalize(np.zeros((2, 3, 4), np.float32), np.ones((2, 4), np.int64))
    with pytest.raises(ValueError, match=r"\[batch, hidden\]"):
        l2_normalize(np.zeros((2, 3, 4), np.float32))
    assert not l2_normalize(np.zeros((1, 4), np.float32)).any()  # no division by zero
