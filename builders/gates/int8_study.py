"""Which INT8 text encoder? Measure the candidates on real text and print the table.

Usage: ``python -m builders.gates.int8_study`` (``make int8-study``; a few minutes on
2 cores). Needs ``make artifacts`` (version 1, the FP32 export, is the baseline).

Candidates, all from ``onnxruntime.quantization``:

* static QDQ, per-channel symmetric INT8 weights, INT8 activations, every MatMul, calibrated on
  real calibration-split text with MinMax, Percentile (99.999) or Entropy;
* static QDQ with UINT8 activations (ONNX Runtime's fast x86 path), only the MatMuls that
  multiply by a weight, Percentile; and the same without the attention-output and feed-forward
  output projections, whose inputs carry BERT's outlier activations;
* ``quantize_dynamic`` (per-channel): activation scales computed per batch at run time;
* weight-only ``MatMulNBits``, 8 bits, blocks of 32, 64 or 128, INT8 compute
  (``accuracy_level=4``).

For each: min and mean cosine of the sentence embeddings to FP32 on 256 eval texts (shuffled
batches of 32, as a dynamic batch mixes lengths), the largest difference between a text
embedded alone and inside its batch of 32, and throughput relative to FP32 (length-sorted
batches of 32, 2 threads, median of 3 interleaved rounds, same process). A candidate is
usable with min cosine ≥ 0.99 and batch difference ≤ 1e-5 (the bars of
``builders.onnx_export.text_embedding_variants.check_int8``). Histogram calibrators (Percentile,
Entropy) need one shape for every calibration batch, so calibration texts are padded to 256
tokens there.
"""

from __future__ import annotations

import logging
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from builders.onnx_export import text_embedding_variants as variants
from reference_data import text_corpus as corpus
from tritonrepo.paths import BUILD_DIR, MODEL_REPOSITORY
from tritonrepo.text import spec
from tritonrepo.text.tokenization import TextTokenizer

CALIBRATION_TEXTS = 128


def _calibration_reader(tokenizer: TextTokenizer, pad_to: int | None):
    from onnxruntime.quantization import CalibrationDataReader

    texts = corpus.real_texts(CALIBRATION_TEXTS, split="calibration")
    batches = []
    for start in range(0, len(texts), 16):
        ids, mask = tokenizer.encode(texts[start : start + 16])
        if pad_to:
            ids, mask = (np.pad(a, ((0, 0), (0, pad_to - a.shape[1]))) for a in (ids, mask))
        batches.append({"input_ids": ids, "attention_mask": mask})

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.batches = iter(batches)

        def get_next(self):
            return next(self.batches, None)

    return Reader()


def static_qdq(
    fp32: Path, out: Path, tokenizer: TextTokenizer, method: str, activations: str,
    weights_only: bool, exclude: tuple[str, ...] = (),
) -> None:  # fmt: skip
    """Static QDQ quantization of ``fp32`` into ``out`` (see the module docstring)."""
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    prepared = out.with_suffix(".prep.onnx")
    quant_pre_process(str(fp32), str(prepared), skip_symbolic_shape=True)
    nodes = None
    if weights_only:
        graph = onnx.load(str(prepared)).graph
        weights = {i.name for i in graph.initializer}
        nodes = [
            n.name for n in graph.node
            if n.op_type == "MatMul" and any(i in weights for i in n.input)
            and not any(e in n.name for e in exclude)
        ]  # fmt: skip
    quantize_static(
        str(prepared), str(out),
        _calibration_reader(tokenizer, None if method == "MinMax" else spec.MAX_SEQ_LENGTH),
        quant_format=QuantFormat.QDQ, per_channel=True,
        activation_type=QuantType.QUInt8 if activations == "uint8" else QuantType.QInt8,
        weight_type=QuantType.QInt8, calibrate_method=getattr(CalibrationMethod, method),
        op_types_to_quantize=["MatMul"], nodes_to_quantize=nodes,
        extra_options={"ActivationSymmetric": activations == "int8", "WeightSymmetric": True},
    )  # fmt: skip
    prepared.unlink(missing_ok=True)


def dynamic(fp32: Path, out: Path) -> None:
    """``quantize_dynamic`` with per-channel INT8 weights."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(fp32), str(out), per_channel=True, weight_type=QuantType.QInt8)


def candidates(tokenizer: TextTokenizer) -> dict[str, Callable[[Path, Path], None]]:
    """Name → builder ``(fp32_path, out_path)`` of every candidate."""
    out: dict[str, Callable[[Path, Path], None]] = {}
    for method in ("MinMax", "Percentile", "Entropy"):
        out[f"static QDQ S8S8, all MatMuls, {method}"] = lambda f, o, m=method: static_qdq(
            f, o, tokenizer, m, "int8", False
        )
    out["static QDQ U8S8, weight MatMuls, Percentile"] = lambda f, o: static_qdq(
        f, o, tokenizer, "Percentile", "uint8", True
    )
    out["static QDQ U8S8, weight MatMuls but the output projections, Percentile"] = lambda f, o: (
        static_qdq(f, o, tokenizer, "Percentile", "uint8", True, ("/output/dense",))
    )
    out["dynamic (quantize_dynamic, per-channel)"] = dynamic
    for block in (32, 64, 128):
        out[f"MatMulNBits 8-bit weight-only, block {block}, INT8 compute"] = lambda f, o, b=block: (
            variants.quantize_int8(f, o, block_size=b)
        )
    return out


def throughput(sessions: list, tokenizer: TextTokenizer, texts: list[str]) -> list[float]:
    """Texts/s of each session, length-sorted batches of 32, median of 3 interleaved rounds."""
    order = np.argsort([-len(t) for t in texts], kind="stable")
    batches = [[texts[i] for i in order[s : s + 32]] for s in range(0, len(texts), 32)]
    rounds: list[list[float]] = [[] for _ in sessions]
    for _ in range(3):
        for i, session in enumerate(sessions):
            started = time.perf_counter()
            for batch in batches:
                variants.embed(session, tokenizer, batch)
            rounds[i].append(len(texts) / (time.perf_counter() - started))
    return [float(np.median(r)) for r in rounds]


def main() -> int:
    """Build every candidate in a temporary folder, measure, print and save the table."""
    import onnxruntime as ort

    logging.getLogger("onnxruntime").setLevel(logging.ERROR)
    fp32 = MODEL_REPOSITORY / spec.ENCODER_MODEL / "1" / "model.onnx"
    if not fp32.is_file():
        print(f"error: {fp32} is missing; run `make artifacts`", file=sys.stderr)
        return 1
    tokenizer = TextTokenizer(
        MODEL_REPOSITORY / spec.TOKENIZE_MODEL / "1" / "tokenizer.json", spec.MAX_SEQ_LENGTH
    )
    texts = corpus.real_texts(variants.CHECK_TEXTS, split="eval", seed=7)
    batches = [texts[i : i + 32] for i in range(0, len(texts), 32)]

    def session(path: Path):
        options = ort.SessionOptions()
        options.intra_op_num_threads = 2
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    baseline = session(fp32)
    reference = np.concatenate([variants.embed(baseline, tokenizer, b) for b in batches])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, build in candidates(tokenizer).items():
            path = Path(tmp) / "candidate.onnx"
            build(fp32, path)
            candidate = session(path)
            got = np.concatenate([variants.embed(candidate, tokenizer, b) for b in batches])
            alone = np.concatenate([variants.embed(candidate, tokenizer, [t]) for t in texts[:32]])
            cosines = (got * reference).sum(axis=1)
            fp32_speed, speed = throughput([baseline, candidate], tokenizer, texts[:128])
            rows.append(
                (name, cosines.min(), cosines.mean(), np.abs(alone - got[:32]).max(),
                 speed / fp32_speed)
            )  # fmt: skip
            print(f"{name}: min cos {cosines.min():.5f}, x{speed / fp32_speed:.2f}", flush=True)
    lines = [
        "| candidate | min cos vs FP32 | mean cos | batch 1 vs 32 max abs diff | speed vs FP32 |",
        "|---|---|---|---|---|",
    ]
    for name, low, mean, diff, speed in rows:
        lines.append(f"| {name} | {low:.5f} | {mean:.5f} | {diff:.1e} | {speed:.2f}x |")
    out = BUILD_DIR / "int8_study.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
