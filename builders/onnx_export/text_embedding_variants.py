"""Faster CPU variants of the text encoder, built from its FP32 ONNX export, and their checks.

* **FP32 + transformer fusions** (:func:`fuse`): ONNX Runtime's transformer optimizer
  (``onnxruntime.transformers.optimizer.optimize_model``, ``model_type="bert"``, 12 heads,
  hidden 384 from the model's ``config.json``) fuses the embeddings + LayerNorm
  (EmbedLayerNormalization), self-attention (Attention), residual + LayerNorm
  (SkipLayerNormalization) and bias + GELU (BiasGelu). Same FP32 arithmetic, fewer kernels;
  checked for parity against PyTorch like the plain export.
* **INT8 weight-only** (:func:`quantize_int8`): every MatMul with a weight becomes ONNX Runtime's
  ``MatMulNBits`` with 8-bit symmetric weights in blocks of ``INT8_BLOCK_SIZE`` along K, and
  ``accuracy_level=4``: the kernel quantizes the activations to INT8 itself, block by block
  *within each row* (ContribOperators.md, MatMulNBits: "input A can be quantized with the same
  block_size to int8 internally"), and runs INT8 dot products (AVX-512 VNNI here). No scale is
  shared across rows, so an embedding does not depend on the other requests of its dynamic
  batch — unlike ``quantize_dynamic`` (one activation scale per tensor, i.e. per batch) — and
  no calibration set can be wrong for it. ``builders.gates.int8_study`` measures it
  against the static-QDQ candidates; the README gives that table.

:func:`check_int8` enforces two bars on the real-text eval set: min cosine to FP32 ≥ 0.99,
and batch 1 vs batch 32 max abs diff ≤ 1e-5.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from reference_data import text_corpus as corpus
from tritonrepo.text.pooling import l2_normalize
from tritonrepo.text.tokenization import TextTokenizer

NUM_HEADS = 12  # all-MiniLM-L6-v2 config.json: num_attention_heads
INT8_BLOCK_SIZE = 64  # measured: block 64 ran faster than 32 at min cosine 0.999 (study)
INT8_MIN_COSINE = 0.99  # min cosine to FP32 on the real-text set
BATCH_INDEPENDENCE_TOLERANCE = 1e-5  # batch 1 vs batch 32, max abs diff
CHECK_TEXTS = 256  # eval-split texts for the INT8 checks


def fuse(fp32_path: Path, out_path: Path, hidden_size: int) -> dict[str, int]:
    """Write ``fp32_path`` with ONNX Runtime's BERT fusions applied to ``out_path``.

    Returns:
        Fused operator counts (e.g. ``{"Attention": 6, ...}``, zeros dropped).

    Raises:
        RuntimeError: the optimizer fused no attention (the graph no longer matches its
            patterns; serving the unfused graph would silently lose the point of this version).
    """
    from onnxruntime.transformers import optimizer

    model = optimizer.optimize_model(
        str(fp32_path), model_type="bert", num_heads=NUM_HEADS, hidden_size=hidden_size
    )
    fused = {k: v for k, v in model.get_fused_operator_statistics().items() if v}
    if not fused.get("Attention"):
        raise RuntimeError(f"the transformer optimizer fused no Attention node: {fused}")
    model.save_model_to_file(str(out_path))
    return fused


def quantize_int8(fp32_path: Path, out_path: Path, block_size: int = INT8_BLOCK_SIZE) -> int:
    """Write the INT8 weight-only variant of ``fp32_path`` to ``out_path``.

    Returns:
        The number of MatMul nodes turned into MatMulNBits.
    """
    import logging

    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    # It logs one INFO line per node it skips.
    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.WARNING)
    quantizer = MatMulNBitsQuantizer(
        onnx.load(str(fp32_path)), bits=8, block_size=block_size, is_symmetric=True,
        accuracy_level=4,
    )  # fmt: skip
    quantizer.process()
    quantizer.model.save_model_to_file(str(out_path), use_external_data_format=False)
    return sum(1 for node in quantizer.model.model.graph.node if node.op_type == "MatMulNBits")


def embed(session, tokenizer: TextTokenizer, texts: list[str]) -> np.ndarray:
    """Sentence embeddings FP32 ``[len(texts), hidden]`` of one batch, as the ensemble computes
    them (tokenized together, padded to the longest, mean-pooled, L2-normalised)."""
    ids, mask = tokenizer.encode(texts)
    (pooled,) = session.run(None, {"input_ids": ids, "attention_mask": mask})
    return l2_normalize(pooled)


def session_for(path: Path):
    """An ONNX Runtime CPU session (default threads)."""
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def check_int8(
    fp32_path: Path, int8_path: Path, tokenizer: TextTokenizer, num_texts: int = CHECK_TEXTS
) -> dict[str, float]:
    """Measure the INT8 variant on ``num_texts`` real eval texts.

    Returns:
        ``{"min_cosine_vs_fp32", "mean_cosine_vs_fp32", "batch_1_vs_32_max_abs_diff"}``: cosines
        of pooled embeddings (both computed in shuffled batches of 32, as a dynamic batch would
        mix lengths), and the largest difference between a text embedded alone and in its batch.

    Raises:
        RuntimeError: min cosine < ``INT8_MIN_COSINE`` or the batch difference >
            ``BATCH_INDEPENDENCE_TOLERANCE``.
    """
    texts = corpus.real_texts(num_texts, split="eval", seed=7)
    fp32, int8 = session_for(fp32_path), session_for(int8_path)
    batches = [texts[i : i + 32] for i in range(0, len(texts), 32)]
    reference = np.concatenate([embed(fp32, tokenizer, b) for b in batches])
    batched = np.concatenate([embed(int8, tokenizer, b) for b in batches])
    alone = np.concatenate([embed(int8, tokenizer, [t]) for t in texts])
    cosines = (reference * batched).sum(axis=1)
    figures = {
        "min_cosine_vs_fp32": float(cosines.min()),
        "mean_cosine_vs_fp32": float(cosines.mean()),
        "batch_1_vs_32_max_abs_diff": float(np.abs(alone - batched).max()),
    }
    if figures["min_cosine_vs_fp32"] < INT8_MIN_COSINE:
        raise RuntimeError(f"INT8 min cosine {figures['min_cosine_vs_fp32']:.5f} < 0.99")
    if figures["batch_1_vs_32_max_abs_diff"] > BATCH_INDEPENDENCE_TOLERANCE:
        raise RuntimeError(
            f"INT8 embeddings depend on the batch: max abs diff "
            f"{figures['batch_1_vs_32_max_abs_diff']:.2e} > {BATCH_INDEPENDENCE_TOLERANCE}"
        )
    return figures
