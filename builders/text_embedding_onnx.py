"""Build the text_embedding artifacts from the source weights (no hub download).

Writes, for model repository version ``--version`` (default 1):

* ``text_embedding_encoder/<v>/model.onnx``: the BERT encoder of all-MiniLM-L6-v2, inputs
  ``input_ids``/``attention_mask`` INT64 ``[batch, seq]`` (both axes dynamic), output
  ``token_embeddings`` FP32 ``[batch, seq, 384]``; opset 17, exported with a batch of 2 texts of
  different lengths, checked by ``onnx.checker``;
* ``text_embedding_encoder/<v>/build_metadata.json``: versions, sha256, parity figures;
* ``text_embedding_tokenize/<v>/tokenizer.json``: the model's own tokenizer.

Parity: ONNX Runtime against PyTorch at batch 1 and at batch 7 with mixed lengths (short, long,
truncated at 256 tokens); the max abs difference of ``token_embeddings`` over real tokens
(``attention_mask == 1``) must be < 1e-4. Rows at padding positions are reported but not checked:
pooling discards them, and both runtimes fill them with unconstrained values (seen: ~2e-4 apart
there while real tokens agree to ~3e-6).

Usage: ``python -m builders.text_embedding_onnx [--repository DIR] [--version N]``
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np

from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.text import spec
from tritonrepo.text.tokenization import TextTokenizer

PARITY_TOLERANCE = 1e-4  # max abs diff of token_embeddings, ONNX Runtime vs PyTorch

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
    """Wraps the Hugging Face BERT so the graph takes (input_ids, attention_mask) only."""

    @staticmethod
    def build(model_dir: Path):
        """The wrapper ``torch.nn.Module`` in eval mode (token_type_ids are all zero)."""
        import torch
        from transformers import AutoModel

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
                return out.last_hidden_state

        return Encoder().eval()


def sha256(path: Path) -> str:
    """Hex sha256 of a file."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


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
                spec.ENCODER_OUTPUT: dynamic,
            },
            opset_version=spec.ONNX_OPSET,
            do_constant_folding=True,
            dynamo=False,  # torch 2.13 defaults to dynamo, which ignores dynamic_axes
        )
    onnx.checker.check_model(str(onnx_path), full_check=True)


def parity(encoder, tokenizer: TextTokenizer, onnx_path: Path) -> dict[str, float]:
    """Max abs difference of ``token_embeddings``, ONNX Runtime vs PyTorch, per batch case.

    Returns:
        ``{"batch_1": d, "batch_7_mixed": d, "batch_7_mixed_padding": d}``: ``d`` over real
        tokens, except the ``_padding`` entry (padding positions only, not checked).
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
        real = mask.astype(bool)
        diff = np.abs(got - expected)
        diffs[name] = float(diff[real].max())
        if (~real).any():
            diffs[f"{name}_padding"] = float(diff[~real].max())
    return diffs


def build(repository: Path, version: int) -> dict:
    """Build all text_embedding artifacts into ``repository``; return the build metadata.

    Raises:
        RuntimeError: the parity check fails (max abs diff ≥ 1e-4).
    """
    import onnx
    import onnxruntime
    import torch

    model_dir = Path(spec.source_model_dir())
    encoder_dir = repository / spec.ENCODER_MODEL / str(version)
    tokenize_dir = repository / spec.TOKENIZE_MODEL / str(version)
    encoder_dir.mkdir(parents=True, exist_ok=True)
    tokenize_dir.mkdir(parents=True, exist_ok=True)

    tokenizer_path = tokenize_dir / "tokenizer.json"
    shutil.copyfile(model_dir / "tokenizer.json", tokenizer_path)
    tokenizer = TextTokenizer(tokenizer_path, spec.MAX_SEQ_LENGTH)

    torch.manual_seed(0)
    encoder = EncoderForExport.build(model_dir)
    onnx_path = encoder_dir / "model.onnx"
    tmp_path = onnx_path.with_suffix(".onnx.tmp")
    export_onnx(encoder, tokenizer, tmp_path)
    diffs = parity(encoder, tokenizer, tmp_path)
    print(
        "parity ONNX Runtime vs PyTorch, max abs diff: "
        + ", ".join(f"{k} {v:.2e}" for k, v in diffs.items())
    )
    worst = max(v for k, v in diffs.items() if not k.endswith("_padding"))
    if worst >= PARITY_TOLERANCE:
        tmp_path.unlink()
        raise RuntimeError(f"parity check failed: max abs diff {worst:.3e} >= {PARITY_TOLERANCE}")
    os.replace(tmp_path, onnx_path)

    metadata = {
        "source_model": spec.SOURCE_MODEL,
        "source_dir": str(model_dir),
        "built_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "opset": spec.ONNX_OPSET,
        "max_seq_length": spec.MAX_SEQ_LENGTH,
        "parity_max_abs_diff": diffs,
        "parity_tolerance": PARITY_TOLERANCE,
        "versions": {
            "torch": torch.__version__,
            "onnx": onnx.__version__,
            "onnxruntime": onnxruntime.__version__,
        },
        "files": {
            "model.onnx": sha256(onnx_path),
            f"../../{spec.TOKENIZE_MODEL}/{version}/tokenizer.json": sha256(tokenizer_path),
        },
    }
    (encoder_dir / "build_metadata.json").write_text(json.dumps(metadata, indent=2) + "\n")
    return metadata


def main(argv: list[str] | None = None) -> int:
    """Command line: build, print where the artifacts went; exit 1 on a failed check."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repository", type=Path, default=MODEL_REPOSITORY)
    parser.add_argument("--version", type=int, default=1)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        build(args.repository, args.version)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {args.repository / spec.ENCODER_MODEL / str(args.version) / 'model.onnx'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
