"""Build the ctr_model artifacts: train on the synthetic click log, export, quantize.

Steps (all on CPU, seeded; about four minutes on two cores, most of it training):

1. **Train** ``builders.onnx_export.ctr_network.CtrTransformer`` on ``TRAIN_ROWS`` samples of the
click log
   (``reference_data.click_log``; one epoch, AdamW lr 1e-3, batch 64, BCE on logits) and measure
   the held-out AUC (``sklearn.metrics.roc_auc_score``) on ``HELDOUT_ROWS`` samples of a disjoint
   split. The build fails below ``MIN_AUC`` (0.75; the trained network measures 0.79).
   Weights: ``build/ctr/model.pt``.
2. **Export** ``ctr_model/1/model.onnx``: input ``input_ids`` INT64 ``[batch, 64]`` (batch
   dynamic), output ``ctr`` FP32 ``[batch, 1]``; opset 17, TorchScript exporter
   (``dynamo=False``, for ``dynamic_axes``), ``onnx.checker``. Parity: ONNX Runtime vs PyTorch on
   256 held-out rows, max abs diff < 1e-5.
3. **INT8** ``ctr_model/2/model.onnx``: ONNX Runtime static quantization (QDQ, per-channel
   weights, symmetric INT8 activations) calibrated on real click-log rows from the calibration
   split (``click_log.calibration_batches``, the loader the TensorRT builder uses too); for
   comparison ``build/ctr/model_int8_random_calibration.onnx``, calibrated on random ids. Static
   quantization fixes every scale at build time, so a row's score does not depend on its batch
   neighbours (checked: batch 1 vs batch 256 give identical scores).
4. **Metadata** ``ctr_model/<v>/build_metadata.json``: AUC of FP32, INT8 (log calibration) and
   INT8 (random calibration), parity, generator and training parameters, and the common fields
   of ``builders.metadata`` (``built_by``, library ``versions``, ``sha256``).

Usage: ``python -m builders.onnx_export.ctr [--repository DIR] [--train-rows N] [--reuse-weights]``
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import sys
import time
from pathlib import Path

import numpy as np

from builders.file_digest import sha256
from builders.host_sources import TORCH_EXPORT, Sources
from builders.metadata import BUILD_METADATA_FILE, write_metadata
from builders.onnx_export.quantization import quantize_qdq
from reference_data.click_log import (
    HELDOUT_SPLIT,
    TRAIN_SPLIT,
    ClickLog,
    ClickLogGenerator,
    calibration_batches,
)
from tritonrepo.ctr import spec
from tritonrepo.paths import BUILD_DIR, MODEL_REPOSITORY

TRAIN_ROWS = 48_000
HELDOUT_ROWS = 10_000
BATCH_SIZE = 64
LEARNING_RATE = 1e-3
TORCH_SEED = 0
MIN_AUC = 0.75
PARITY_ROWS = 256
PARITY_TOLERANCE = 1e-5
CALIBRATION_ROWS = 512
WEIGHTS = BUILD_DIR / "ctr" / "model.pt"
TRAINING_REPORT = BUILD_DIR / "ctr" / "training.json"
RANDOM_CALIBRATION_MODEL = BUILD_DIR / "ctr" / "model_int8_random_calibration.onnx"
BUILT_BY = "builders.onnx_export.ctr"  # this module (``__name__`` is ``__main__`` under -m)
# Where builders.tensorrt.plans gets this module's plan feeds (builders.pipeline.plan_feeds).
PLAN_FEEDS = "builders.tensorrt.spec_feeds:text_or_ctr"
LIBRARIES = ("torch", "onnx", "onnxruntime", "numpy", "scikit-learn")
# What the GPU host exports ctr_model from (builders.gpu_sources): the trained network (WEIGHTS).
GPU_SOURCES = {spec.CORE_MODEL: Sources(TORCH_EXPORT, files=("build/ctr/model.pt",))}


def auc(clicks: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve (``sklearn.metrics.roc_auc_score``); clicks FP32 ``[n]`` in
    {0, 1}, scores FP32 ``[n]``."""
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(clicks, scores))


def train(log: ClickLog, heldout: ClickLog, weights: Path, log_every: int = 8_000) -> dict:
    """Train the network on ``log`` for one epoch and save its ``state_dict`` to ``weights``.

    Returns:
        ``{"heldout_auc", "train_seconds", "final_loss"}``.
    """
    import torch

    from builders.onnx_export import ctr_network

    torch.manual_seed(TORCH_SEED)
    model = ctr_network.CtrTransformer()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE)
    rows, clicks = torch.as_tensor(log.rows), torch.as_tensor(log.clicks)
    order = torch.randperm(len(rows))
    started, running = time.monotonic(), []
    model.train()
    for _step, start in enumerate(range(0, len(rows), BATCH_SIZE), start=1):
        batch = order[start : start + BATCH_SIZE]
        loss = torch.nn.functional.binary_cross_entropy_with_logits(
            model.logits(rows[batch]).squeeze(1), clicks[batch]
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        running.append(loss.item())
        if (start + BATCH_SIZE) % log_every < BATCH_SIZE:
            print(f"  {start + BATCH_SIZE:>6} rows  loss {np.mean(running[-100:]):.4f}", flush=True)
    model.eval()
    weights.parent.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), weights)
    score = auc(heldout.clicks, ctr_network.predict(model, heldout.rows))
    return {
        "heldout_auc": round(score, 4),
        "train_seconds": round(time.monotonic() - started, 1),
        "final_loss": round(float(np.mean(running[-100:])), 4),
    }


def export_onnx(weights: Path, onnx_path: Path) -> None:
    """Export the trained network to ``onnx_path`` (batch axis dynamic) and run the checker.

    The graph is ``ctr_network.ExportGraph``: the same weights and arithmetic with explicit
    attention, which ONNX Runtime runs faster and whose projections INT8 can quantize."""
    import onnx
    import torch

    from builders.onnx_export import ctr_network

    model = ctr_network.ExportGraph(ctr_network.load(weights)).eval()
    example = torch.randint(0, spec.VOCAB_SIZE, (2, spec.SEQ_LENGTH), dtype=torch.int64)
    onnx_path.parent.mkdir(parents=True, exist_ok=True)
    torch.onnx.export(
        model,
        (example,),
        str(onnx_path),
        input_names=[spec.CORE_INPUT],
        output_names=[spec.CORE_OUTPUT],
        dynamic_axes={spec.CORE_INPUT: {0: "batch"}, spec.CORE_OUTPUT: {0: "batch"}},
        opset_version=spec.ONNX_OPSET,
        dynamo=False,
    )
    onnx.checker.check_model(onnx.load(str(onnx_path)), full_check=True)


def onnx_scores(onnx_path: Path, rows: np.ndarray, batch_size: int = 256) -> np.ndarray:
    """CTR of each row (INT64 ``[n, 64]``) with ONNX Runtime on CPU, FP32 ``[n]``."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    out = [
        session.run([spec.CORE_OUTPUT], {spec.CORE_INPUT: rows[i : i + batch_size]})[0]
        for i in range(0, len(rows), batch_size)
    ]
    return np.concatenate(out).reshape(-1)


def parity(weights: Path, onnx_path: Path, rows: np.ndarray) -> float:
    """Max abs diff of ``ctr``, ONNX Runtime vs PyTorch, on ``rows`` (INT64 ``[n, 64]``).

    Raises:
        RuntimeError: the difference is not below ``PARITY_TOLERANCE`` (1e-5).
    """
    from builders.onnx_export import ctr_network

    reference = ctr_network.predict(ctr_network.load(weights), rows)
    diff = float(np.max(np.abs(onnx_scores(onnx_path, rows) - reference)))
    if not diff < PARITY_TOLERANCE:
        raise RuntimeError(f"ONNX Runtime vs PyTorch: max abs diff {diff:.2e} >= 1e-5")
    return diff


def weight_matmuls(onnx_path: Path) -> list[str]:
    """Names of the MatMul/Gemm nodes that multiply by a weight (an initializer): the Q/K/V,
    output and feed-forward projections and the head, not the attention-score products."""
    import onnx

    graph = onnx.load(str(onnx_path)).graph
    weights = {init.name for init in graph.initializer}
    return [
        node.name
        for node in graph.node
        if node.op_type in ("MatMul", "Gemm") and any(name in weights for name in node.input)
    ]


def quantize_int8(fp32_path: Path, out_path: Path, calibration: str) -> None:
    """Static INT8 quantization of ``fp32_path`` calibrated on ``calibration`` rows ("log" or
    "random", see ``calibration_batches``). QDQ format, per-channel symmetric INT8 weights,
    symmetric INT8 activations (the layout TensorRT reads), MinMax ranges, applied to the
    weight projections only (:func:`weight_matmuls`). Measured on 2 cores at 32 rows per run:
    quantizing every MatMul (the attention-score products too, as the first build did) made
    ONNX Runtime slower than FP32 (1.00 vs 0.79 ms per row) and moved the CTR 4× more (mean
    |ΔCTR| 0.009), while the projections alone ran at 0.58 ms per row with |ΔCTR| 0.0026."""
    batches = calibration_batches(CALIBRATION_ROWS, batch_size=32, source=calibration)
    quantize_qdq(fp32_path, out_path, ({spec.CORE_INPUT: b} for b in batches), nodes=weight_matmuls)


def batch_independent(onnx_path: Path, rows: np.ndarray) -> float:
    """Max abs diff of scores computed one row at a time vs all ``rows`` in one batch."""
    single = np.concatenate([onnx_scores(onnx_path, rows[i : i + 1]) for i in range(len(rows))])
    return float(np.max(np.abs(single - onnx_scores(onnx_path, rows, batch_size=len(rows)))))


def build(repository: Path, train_rows: int = TRAIN_ROWS, reuse_weights: bool = False) -> dict:
    """Train, export, quantize and write the metadata of every ``spec.CORE_VERSIONS`` version.

    Args:
        repository: the model repository to write into.
        train_rows: training samples (one epoch).
        reuse_weights: skip training when ``build/ctr/model.pt`` exists (for iterating on the
            export or quantization).

    Returns:
        The metadata written to version 1.

    Raises:
        RuntimeError: held-out AUC below ``MIN_AUC`` or a failed parity check.
    """
    generator = ClickLogGenerator()
    print(f"click log: {train_rows} training rows, {HELDOUT_ROWS} held-out rows", flush=True)
    log = generator.sample(train_rows, TRAIN_SPLIT)
    heldout = generator.sample(HELDOUT_ROWS, HELDOUT_SPLIT)
    if reuse_weights and TRAINING_REPORT.is_file() and WEIGHTS.is_file():
        training = json.loads(TRAINING_REPORT.read_text())
        print(f"reusing {WEIGHTS} (--reuse-weights)", flush=True)
    else:
        training = train(log, heldout, WEIGHTS)
        TRAINING_REPORT.write_text(json.dumps(training) + "\n")
    print(f"held-out AUC (PyTorch): {training['heldout_auc']:.4f}", flush=True)
    if training["heldout_auc"] < MIN_AUC:
        raise RuntimeError(f"held-out AUC {training['heldout_auc']:.4f} < {MIN_AUC}")

    model_dir = repository / spec.CORE_MODEL
    fp32_path, int8_path = model_dir / "1" / "model.onnx", model_dir / "2" / "model.onnx"
    export_onnx(WEIGHTS, fp32_path)
    max_diff = parity(WEIGHTS, fp32_path, heldout.rows[:PARITY_ROWS])
    print(f"parity ONNX Runtime vs PyTorch on {PARITY_ROWS} rows: {max_diff:.2e}", flush=True)
    quantize_int8(fp32_path, int8_path, "log")
    quantize_int8(fp32_path, RANDOM_CALIBRATION_MODEL, "random")
    scores = {
        "fp32": onnx_scores(fp32_path, heldout.rows),
        "int8_log_calibration": onnx_scores(int8_path, heldout.rows),
        "int8_random_calibration": onnx_scores(RANDOM_CALIBRATION_MODEL, heldout.rows),
    }
    aucs = {k: round(auc(heldout.clicks, v), 4) for k, v in scores.items()}
    ctr_error = {k: round(float(np.mean(np.abs(v - scores["fp32"]))), 6) for k, v in scores.items()}
    print("held-out AUC (ONNX Runtime): " + ", ".join(f"{k} {v}" for k, v in aucs.items()))
    print("mean |CTR - FP32 CTR|: " + ", ".join(f"{k} {v}" for k, v in ctr_error.items()))
    int8_batch_diff = batch_independent(int8_path, heldout.rows[:PARITY_ROWS])
    if int8_batch_diff != 0.0:
        print(f"warning: INT8 scores depend on the batch (max abs diff {int8_batch_diff:.2e})")

    common = {
        "model": spec.CORE_MODEL,
        "built_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "onnx_opset": spec.ONNX_OPSET,
        "click_log": dataclasses.asdict(generator.config)
        | {"train_rows": train_rows, "heldout_rows": HELDOUT_ROWS},
        "training": training
        | {"batch_size": BATCH_SIZE, "learning_rate": LEARNING_RATE, "torch_seed": TORCH_SEED},
        "heldout_auc": aucs,
        "heldout_mean_abs_ctr_diff_vs_fp32": ctr_error,
        "weights_sha256": sha256(WEIGHTS),
    }
    metadata = {
        1: common | {"version": 1, "precision": "fp32", "parity_max_abs_diff": max_diff},
        2: common
        | {
            "version": 2,
            "precision": "int8",
            "calibration": f"{CALIBRATION_ROWS} rows of the click log's calibration split",
            "batch_1_vs_batch_256_max_abs_diff": int8_batch_diff,
        },
    }
    for version, path in ((1, fp32_path), (2, int8_path)):
        metadata[version] = write_metadata(
            path.parent / BUILD_METADATA_FILE,
            metadata[version],
            built_by=BUILT_BY,
            libraries=LIBRARIES,
            artifacts={"model.onnx": path},
        )
    return metadata[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repository", type=Path, default=MODEL_REPOSITORY)
    parser.add_argument("--train-rows", type=int, default=TRAIN_ROWS)
    parser.add_argument(
        "--reuse-weights", action="store_true", help="skip training if build/ctr/model.pt exists"
    )
    args = parser.parse_args(argv)
    try:
        build(args.repository, args.train_rows, args.reuse_weights)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
