"""The ocr pipeline's two core models: the PP-OCRv4 text detector and recogniser that the
``rapidocr_onnxruntime`` package ships as ONNX files (its ``models/`` folder)."""

from pathlib import Path

import rapidocr_onnxruntime

MODELS = Path(rapidocr_onnxruntime.__file__).parent / "models"
DETECTOR = MODELS / "ch_PP-OCRv4_det_infer.onnx"  # x [n, 3, H, W] -> sigmoid_0.tmp_0 [n, 1, H, W]
RECOGNISER = MODELS / "ch_PP-OCRv4_rec_infer.onnx"  # x [n, 3, 48, W] -> softmax_11.tmp_0


def detector() -> Path:
    """The detector's file: input ``x`` FP32 ``[n, 3, H, W]`` (H, W multiples of 32), output
    ``sigmoid_0.tmp_0`` FP32 ``[n, 1, H, W]``, the probability that a pixel is text."""
    return DETECTOR


def recogniser() -> Path:
    """The recogniser's file: input ``x`` FP32 ``[n, 3, 48, W]`` (text-line crops), output
    ``softmax_11.tmp_0`` FP32 ``[n, W/8, 6625]``, per-position character probabilities (CTC; its
    character list is the model's ``character`` metadata)."""
    return RECOGNISER
