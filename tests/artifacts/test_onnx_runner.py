"""Sequence packing in the ONNX Runtime backend (no server): packing changes no real-token output.

The reference is ONNX Runtime itself running each request alone on its own padded input, the
way the backend ran before packing; packing must only change how rows are grouped.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reference_data import text_corpus as corpus
from tests.conftest import require_artifacts
from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.runners.onnx_runner import OnnxRunner, pack_by_length
from tritonrepo.step.errors import InvalidRequest
from tritonrepo.text import spec
from tritonrepo.text.tokenization import TextTokenizer

ENCODER = MODEL_REPOSITORY / spec.ENCODER_MODEL / "1" / "model.onnx"


@given(
    lengths=st.lists(st.integers(0, 300), min_size=1, max_size=80),
    max_tokens=st.integers(1, 4096),
    max_padding=st.floats(0.0, 1.0),
)
@settings(max_examples=300, deadline=None)
def test_pack_by_length_covers_every_row_once_within_limits(lengths, max_tokens, max_padding):
    lengths = np.array(lengths)
    chunks = pack_by_length(lengths, max_tokens, max_padding)
    assert sorted(np.concatenate(chunks).tolist()) == list(range(len(lengths)))
    for chunk in chunks:
        longest = max(int(lengths[chunk].max()), 1)
        padded = len(chunk) * longest
        if len(chunk) > 1:  # a single row may exceed the budget: it runs alone
            assert padded <= max_tokens
            assert padded - lengths[chunk].sum() <= max_padding * padded + 1e-9
    firsts = [int(lengths[c[0]]) for c in chunks]
    assert firsts == sorted(firsts, reverse=True), "sub-batches run longest first"


def test_pack_by_length_groups_similar_lengths():
    lengths = np.array([100, 250, 102, 101, 240, 99])
    chunks = pack_by_length(lengths, max_tokens=2048, max_padding=0.1)
    assert [sorted(c.tolist()) for c in chunks] == [[1, 4], [0, 2, 3, 5]]


@pytest.fixture(scope="module")
def tokenized_requests():
    """Requests as the tokenizer step makes them: groups padded to their longest text."""
    require_artifacts()
    tokenizer = TextTokenizer(
        MODEL_REPOSITORY / spec.TOKENIZE_MODEL / "1" / "tokenizer.json", spec.MAX_SEQ_LENGTH
    )
    texts = corpus.real_texts(24, seed=3)
    requests = []
    for start, size in ((0, 1), (1, 5), (6, 3), (9, 7), (16, 8)):
        ids, mask = tokenizer.encode(texts[start : start + size])
        requests.append({"input_ids": ids, "attention_mask": mask})
    return requests


def test_packing_matches_each_request_run_alone(tokenized_requests):
    session = ort.InferenceSession(str(ENCODER), providers=["CPUExecutionProvider"])
    runner = OnnxRunner(ENCODER, sequence_mask="attention_mask", max_tokens=512)
    results = runner.run_batch(tokenized_requests)
    for request, result in zip(tokenized_requests, results, strict=True):
        (alone,) = session.run(None, request)
        got = result[spec.ENCODER_OUTPUT]
        assert got.shape == alone.shape == (len(request["input_ids"]), spec.HIDDEN_SIZE)
        np.testing.assert_allclose(got, alone, atol=1e-5, rtol=0)


def test_packed_rows_do_not_depend_on_their_neighbours(tokenized_requests):
    runner = OnnxRunner(ENCODER, sequence_mask="attention_mask")
    together = runner.run_batch(tokenized_requests)
    for i, request in enumerate(tokenized_requests):
        (alone,) = runner.run_batch([request])
        got = together[i][spec.ENCODER_OUTPUT]
        assert np.abs(got - alone[spec.ENCODER_OUTPUT]).max() <= 1e-5


def test_bad_request_gets_its_own_error(tokenized_requests):
    runner = OnnxRunner(ENCODER, sequence_mask="attention_mask")
    good = tokenized_requests[1]
    ragged = {"input_ids": good["input_ids"], "attention_mask": good["attention_mask"][:, :-1]}
    missing = {"input_ids": good["input_ids"]}
    results = runner.run_batch([good, ragged, missing, tokenized_requests[2]])
    assert isinstance(results[1], InvalidRequest) and "share [batch, seq]" in str(results[1])
    assert isinstance(results[2], InvalidRequest) and "attention_mask" in str(results[2])
    assert results[0][spec.ENCODER_OUTPUT].shape == (len(good["input_ids"]), spec.HIDDEN_SIZE)
    assert len(results[3][spec.ENCODER_OUTPUT]) == len(tokenized_requests[2]["input_ids"])


def test_unknown_mask_input_is_refused():
    require_artifacts()
    with pytest.raises(ValueError, match="not an input"):
        OnnxRunner(ENCODER, sequence_mask="mask")
