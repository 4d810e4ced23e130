"""TensorRT plans of the image classifiers: real-photo feeds (INT8 calibration, accuracy gate)
and the gate itself, for ``builders/tensorrt/plans.py`` (through ``builders.tensorrt.spec_feeds``,
which the classifiers' builder ``builders/onnx_export/image.py`` names in ``PLAN_FEEDS``).

The TensorRT builder image (``docker/Dockerfile.builder``) installs neither Pillow nor scikit-image,
so ``make artifacts`` stores the photos already cropped and resized (uint8 RGB,
``tritonrepo.image.preprocess.crop_resize``, per model preprocessing) in ``PIXELS_FILE``
(:func:`write_pixels`, called by ``builders/onnx_export/image.py``); the builder only normalises
them (numpy). Each model's preprocessing is ``spec.MODEL_PREPROCESSING[model]``. Calibration
uses the same augmented photographs as the CPU INT8 version (seed 1), the
gate other augmentations (seed 2) plus the named photos: real images, never random tensors.

Gate figures, against ONNX Runtime FP32 on the FP32 export (version 1): top-1 agreement and max
abs softmax-probability difference over ``GATE_IMAGES`` + the named photos. Tolerances
(``TOLERANCES``): FP32 agreement 1.0 and probability diff 1e-4 (the served-vs-PyTorch bar of
``tests/server/test_image_classification.py``); FP16 0.98 and 0.01 (set before any FP16 build was
measured: EfficientNet-Lite's ReLU6 activations are bounded, FP16 rounding moves logits by
~1e-3); INT8 0.85 and no probability bar (the CPU INT8 version, QDQ, measures 0.875 top-1
agreement on the same kind of images: ``image_classifier/2/build_metadata.json``). For the
random-weight ResNet-50 the figures only show that the engine computes the same function.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from tritonrepo.image import spec
from tritonrepo.paths import BUILD_DIR

PIXELS_FILE = BUILD_DIR / "tensorrt" / "image_pixels.npz"
CALIBRATION_IMAGES = 64  # 4 batches at the profile's OPT batch of 16
GATE_IMAGES = 64

Feed = dict[str, np.ndarray]


@dataclass(frozen=True)
class ImageTolerance:
    """What a candidate engine must reach against ONNX Runtime FP32 (module docstring)."""

    min_top1_agreement: float
    max_prob_diff: float


TOLERANCES = {
    "fp32": ImageTolerance(1.0, 1e-4),
    "fp16": ImageTolerance(0.98, 1e-2),
    "int8": ImageTolerance(0.85, 1.0),
}


def write_pixels(path: Path = PIXELS_FILE) -> Path:
    """Crop and resize the calibration and gate photographs for the preprocessing of every
    model the image builder writes (``builders.onnx_export.image.MODELS``) into ``path``
    (``.npz``: ``<prep>_calibration`` and ``<prep>_gate``, uint8
    ``[n, 224, 224, 3]``). Needs Pillow and scikit-image (``make artifacts``)."""
    from builders.onnx_export.image import AGREEMENT_SEED, CALIBRATION_SEED, MODELS
    from reference_data import photos
    from tritonrepo.image.preprocess import crop_resize, decode_image

    calibration = photos.augmented_files(CALIBRATION_IMAGES, CALIBRATION_SEED)
    gate = photos.augmented_files(GATE_IMAGES, AGREEMENT_SEED)
    gate += [photos.photo_file(name) for name in photos.PHOTOS]
    arrays = {}
    for key in sorted({spec.MODEL_PREPROCESSING[model] for model in MODELS}):
        prep = spec.PREPROCESSING[key]
        for split, files in (("calibration", calibration), ("gate", gate)):
            arrays[f"{key}_{split}"] = np.stack([crop_resize(decode_image(f), prep) for f in files])
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.stem}.tmp.npz")
    np.savez_compressed(temporary, **arrays)
    temporary.replace(path)
    return path


def pixels(model: str, split: str, path: Path = PIXELS_FILE) -> np.ndarray:
    """FP32 ``[n, 3, 224, 224]`` model input of ``split`` ("calibration" or "gate").

    Raises:
        FileNotFoundError: ``make artifacts`` has not written ``path``.
        KeyError: ``model`` is not an image classifier (``spec.MODEL_PREPROCESSING``).
    """
    from tritonrepo.image.normalise import normalise  # no Pillow in the builder image

    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; build it with `make artifacts`")
    key = spec.MODEL_PREPROCESSING[model]
    with np.load(path) as data:
        return normalise(data[f"{key}_{split}"], spec.PREPROCESSING[key])


def _batches(array: np.ndarray, batch: int) -> list[Feed]:
    return [{spec.CORE_INPUT: array[i : i + batch]} for i in range(0, len(array), batch)]


def calibration_feeds(model: str, profile: dict, path: Path = PIXELS_FILE) -> list[Feed]:
    """INT8 calibration batches at the profile's OPT shape (``[16, 3, 224, 224]``); a last
    partial batch is dropped, since TensorRT calibrates at exactly that shape."""
    opt = profile[spec.CORE_INPUT][1][0]
    data = pixels(model, "calibration", path)
    return _batches(data[: len(data) // opt * opt], opt)


def gate_feeds(model: str, batch: int = 16, path: Path = PIXELS_FILE) -> list[Feed]:
    """The gate's photographs in batches of ``batch``."""
    return _batches(pixels(model, "gate", path), batch)


def measure(reference, candidate, feeds: list[Feed]) -> dict:
    """Top-1 agreement and max abs probability difference of ``candidate`` vs ``reference``
    (Polygraphy runners) over ``feeds``; plain JSON types."""
    from builders.gates.accuracy_gate import paired_outputs
    from tritonrepo.image.postprocess import softmax

    ref, cand = [], []
    for a, b in paired_outputs(reference, candidate, feeds):
        ref.append(a[spec.CORE_OUTPUT])
        cand.append(b[spec.CORE_OUTPUT])
    ref_p, cand_p = softmax(np.concatenate(ref)), softmax(np.concatenate(cand))
    return {
        "images": len(ref_p),
        "top1_agreement": float(np.mean(ref_p.argmax(1) == cand_p.argmax(1))),
        "max_abs_prob_diff": float(np.max(np.abs(ref_p - cand_p))),
    }


def run_gate(model: str, reference, candidate, precision: str, feeds=None) -> dict:
    """:func:`measure` on :func:`gate_feeds`, judged against ``TOLERANCES[precision]``.

    Raises:
        builders.gates.accuracy_gate.GateFailed: a figure is beyond its limit.
    """
    from builders.gates.accuracy_gate import GateFailed

    tolerance = TOLERANCES[precision]
    figures = measure(reference, candidate, feeds if feeds is not None else gate_feeds(model))
    failures = []
    if not figures["top1_agreement"] >= tolerance.min_top1_agreement:
        failures.append(
            f"top-1 agreement {figures['top1_agreement']:.3f} < {tolerance.min_top1_agreement}"
        )
    if not figures["max_abs_prob_diff"] <= tolerance.max_prob_diff:
        failures.append(
            f"max abs probability diff {figures['max_abs_prob_diff']:.2e} > "
            f"{tolerance.max_prob_diff}"
        )
    if failures:
        raise GateFailed(
            f"{model}: accuracy gate failed vs ONNX Runtime FP32: {'; '.join(failures)}"
        )
    return figures | {"tolerance": asdict(tolerance), "passed": True}
