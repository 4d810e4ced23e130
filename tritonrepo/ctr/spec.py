"""Facts about the CTR model that configs, builders, steps, clients and tests share.

The model (``builders/onnx_export/ctr_network.py``): ``Embedding(VOCAB_SIZE, D_MODEL)``
plus a learned position embedding → ``NUM_LAYERS`` ``TransformerEncoderLayer`` (d_model 128, 8
heads, batch_first, pre-norm) → mean over the sequence → ``Linear(128, 1)`` → sigmoid. One input row
is ``SEQ_LENGTH`` item ids: the user's last ``HISTORY_LENGTH`` items, left-padded with ``PAD_ID``,
then the candidate item as the last token.
"""

from __future__ import annotations

VOCAB_SIZE = 10_000
D_MODEL = 128
NUM_HEADS = 8
NUM_LAYERS = 4
FEEDFORWARD = 4 * D_MODEL  # see builders/onnx_export/ctr_network.py for this and the other choices
SEQ_LENGTH = 64
HISTORY_LENGTH = SEQ_LENGTH - 1  # 63 history items + the candidate

# Item ids. Real items are MIN_ITEM_ID..MAX_ITEM_ID. Id 0 is padding. An id outside the
# vocabulary (<1 or >9999: deleted items, ids from a newer catalogue) is mapped to OOV_ID.
# VOCAB_SIZE leaves no spare row, so OOV_ID is the padding id: an unknown item carries no
# information, exactly like an empty history slot (the embedding row of 0 is trained as
# padding, `padding_idx=0`, and stays zero).
PAD_ID = 0
MIN_ITEM_ID = 1
MAX_ITEM_ID = VOCAB_SIZE - 1
OOV_ID = PAD_ID

MAX_CANDIDATES = 512  # per ctr_ranking / ctr_session request
# HISTORY ids accepted per ctr_ranking request. Only the last HISTORY_LENGTH (63) are used, so
# a cap costs callers nothing but trimming; it bounds a request (4096 x 8 bytes = 32 KiB) where
# Triton 2.51 itself accepts gRPC messages of up to 2 GB. Generous so that callers who send a
# user's whole stored history (a few hundred to a few thousand events) are not refused.
MAX_HISTORY = 4096
DEFAULT_TOP_K = 10  # TOP_K is INT32: 1..2**31-1 accepted, anything above n is cut to n

# Triton model names.
RANKING_ENSEMBLE = "ctr_ranking"
PREPROCESS_MODEL = "ctr_preprocess"
CORE_MODEL = "ctr_model"
POSTPROCESS_MODEL = "ctr_postprocess"
SESSION_MODEL = "ctr_session"

CORE_INPUT = "input_ids"  # INT64 [batch, SEQ_LENGTH]
CORE_OUTPUT = "ctr"  # FP32 [batch, 1]

# Every candidate of one ctr_ranking request reaches ctr_model as one request of batch
# len(CANDIDATES); Triton rejects a request whose batch exceeds max_batch_size and an ensemble
# cannot split one, so ctr_model's max_batch_size must cover MAX_CANDIDATES.
CORE_MAX_BATCH_SIZE = MAX_CANDIDATES

ONNX_OPSET = 17
# Versions of ctr_model that `make artifacts` builds: 1 serves FP32, 2 is INT8 (ONNX Runtime
# static quantization calibrated on held-out click-log rows), staged for a rollout.
CORE_VERSIONS: dict[int, str] = {1: "fp32", 2: "int8"}

# TensorRT optimization profile 0 of the ctr_model plan: (min, opt, max) of input_ids
# [batch, SEQ_LENGTH]; opt is the largest preferred batch size.
PROFILE: dict[str, tuple[tuple[int, int], tuple[int, int], tuple[int, int]]] = {
    CORE_INPUT: ((1, SEQ_LENGTH), (32, SEQ_LENGTH), (CORE_MAX_BATCH_SIZE, SEQ_LENGTH))
}
