"""The ocr pipeline's steps: RapidOCR's own pre- and postprocessing (rapidocr_onnxruntime 1.4.4,
its default config.yaml), with the detector run as an ensemble step and the recogniser called
through BLS, in place of the package's in-process ONNX Runtime sessions.

The text-angle classifier is not used (``RapidOCR()(image, use_cls=False)`` is the reference).
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

import numpy as np
import onnx
from PIL import Image
from rapidocr_onnxruntime.ch_ppocr_det import TextDetector
from rapidocr_onnxruntime.ch_ppocr_det.utils import DBPostProcess
from rapidocr_onnxruntime.ch_ppocr_rec import TextRecognizer
from rapidocr_onnxruntime.ch_ppocr_rec.utils import CTCLabelDecode
from rapidocr_onnxruntime.main import DEFAULT_CFG_PATH, RapidOCR
from rapidocr_onnxruntime.utils import LoadImage, LoadImageError, read_yaml

from pipelines.ocr.models import RECOGNISER

RECORD = ("ratio_h", "ratio_w", "top", "left", "raw_h", "raw_w")  # the `record` tensor's columns
DETECTOR_OUTPUT = "sigmoid_0.tmp_0"
RECOGNISER_OUTPUT = "softmax_11.tmp_0"


class _Glue(RapidOCR):
    """RapidOCR's resizing, letterbox, box sorting, cropping and filtering, with its config
    and without its ONNX Runtime sessions."""

    def __init__(self, config: dict[str, Any]) -> None:  # no super(): no sessions
        g = config["Global"]
        self.text_score, self.min_height = g["text_score"], g["min_height"]
        self.width_height_ratio = g["width_height_ratio"]
        self.max_side_len, self.min_side_len = g["max_side_len"], g["min_side_len"]


class _Detector(TextDetector):
    """TextDetector's pre- and postprocessing without its session."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.limit_side_len, self.limit_type = config["limit_side_len"], config["limit_type"]
        self.mean, self.std = config["mean"], config["std"]
        keys = (
            "thresh",
            "box_thresh",
            "max_candidates",
            "unclip_ratio",
            "use_dilation",
            "score_mode",
        )
        self.postprocess_op = DBPostProcess(**{k: config[k] for k in keys})


class _Recogniser(TextRecognizer):
    """TextRecognizer whose session is ``session(batch) -> [probabilities]``."""

    def __init__(self, config: dict[str, Any], session: Any, characters: list[str]) -> None:
        self.session = session
        self.postprocess_op = CTCLabelDecode(character=list(characters))  # it appends to it
        self.rec_batch_num, self.rec_image_shape = config["rec_batch_num"], config["rec_img_shape"]


@lru_cache(maxsize=1)
def _parts() -> tuple[dict[str, Any], _Glue, _Detector, list[str]]:
    config = read_yaml(str(DEFAULT_CFG_PATH))
    meta = {p.key: p.value for p in onnx.load(str(RECOGNISER)).metadata_props}
    return config, _Glue(config), _Detector(config["Det"]), meta["character"].splitlines()


def preprocess(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Decode each image and prepare it for the detector, as ``RapidOCR.__call__`` does.

    Args:
        inputs: ``IMAGE`` BYTES ``[b, 1]``: encoded images (PNG, JPEG, ... as Pillow reads).

    Returns:
        ``x`` FP32 ``[b, 3, H, W]`` (the detector's input: the image scaled so that its short
        side is 736 px, sides multiples of 32, normalized to [-1, 1]); ``image`` UINT8
        ``[b, h, w, 3]`` (BGR, resized and letterboxed: what the boxes are cut from);
        ``record`` FP32 ``[b, 6]`` (:data:`RECORD`: resize ratios, letterbox offsets in px, the
        original height and width in px).

    Raises:
        ValueError: an image cannot be decoded, or the images of one request differ in size
            after resizing (send them in separate requests).
    """
    _, glue, detector, _ = _parts()
    xs, images, records = [], [], []
    for row, item in enumerate(np.asarray(inputs["IMAGE"]).reshape(len(inputs["IMAGE"]), -1)):
        try:
            img = LoadImage()(bytes(item[0]))
        except (LoadImageError, OSError, ValueError, Image.DecompressionBombError) as exc:
            raise ValueError(f"IMAGE row {row}: not an image Pillow can read ({exc})") from None
        raw_h, raw_w = img.shape[:2]
        img, ratio_h, ratio_w = glue.preprocess(img)
        img, record = glue.maybe_add_letterbox(img, {})
        x = detector.get_preprocess(max(img.shape[0], img.shape[1]))(img)
        if x is None:
            raise ValueError(f"IMAGE row {row}: the image is too small to detect text in")
        pad = record["padding_1"]
        xs.append(x)
        images.append(img)
        records.append([ratio_h, ratio_w, pad["top"], pad["left"], raw_h, raw_w])
    if len({x.shape for x in xs}) > 1 or len({i.shape for i in images}) > 1:
        raise ValueError(
            "the images of one request must have the same size; send images of "
            "other sizes in separate requests"
        )
    return {
        "x": np.concatenate(xs).astype(np.float32),
        "image": np.stack(images).astype(np.uint8),
        "record": np.asarray(records, dtype=np.float32),
    }


def recognise(inputs: dict[str, np.ndarray], models: Any) -> dict[str, np.ndarray]:
    """Boxes from the detector's map, each box cut out and read by the recogniser (called
    through ``models["recogniser"]``), as ``RapidOCR.__call__`` does.

    Args:
        inputs: ``det_map`` FP32 ``[b, 1, H, W]`` (text probability per pixel), ``image`` and
            ``record`` (:func:`preprocess`).
        models: ``models["recogniser"]({"x": FP32 [n, 3, 48, w]}) -> {RECOGNISER_OUTPUT: ...}``.

    Returns:
        ``TEXT`` BYTES ``[b, 1]``: the lines read, top to bottom, joined by ``\\n``;
        ``LINES`` BYTES ``[b, 1]``: JSON, a list of ``{"box": [[x, y] x 4] (px of the original
        image, 2 decimals), "text": str, "score": float (4 decimals)}``.

    Raises:
        ModelCallError: the recogniser failed (the request's error).
    """
    config, glue, detector, characters = _parts()

    def session(batch: np.ndarray) -> list[np.ndarray]:
        return [models["recogniser"]({"x": batch.astype(np.float32)})[RECOGNISER_OUTPUT]]

    recogniser = _Recogniser(config["Rec"], session, characters)
    texts, lines = [], []
    for i, record in enumerate(np.asarray(inputs["record"], dtype=np.float64)):
        img = np.asarray(inputs["image"][i])
        ratio_h, ratio_w, top, left, raw_h, raw_w = record.tolist()
        boxes, _ = detector.postprocess_op(inputs["det_map"][i : i + 1], img.shape[:2])
        boxes = detector.filter_tag_det_res(boxes, img.shape[:2])
        found = []
        if len(boxes) > 0:
            boxes = glue.sorted_boxes(boxes)
            results, _ = recogniser(glue.get_crop_img_list(img, boxes))
            steps = {
                "preprocess": {"ratio_h": ratio_h, "ratio_w": ratio_w},
                "padding_1": {"top": top, "left": left},
            }
            origin = glue._get_origin_points(boxes, steps, int(raw_h), int(raw_w))
            found = [
                {"box": np.round(box, 2).tolist(), "text": text, "score": round(float(score), 4)}
                for box, (text, score, *_) in zip(origin, results, strict=True)
                if float(score) >= glue.text_score
            ]
        texts.append("\n".join(line["text"] for line in found).encode())
        lines.append(json.dumps(found, ensure_ascii=False).encode())
    return {
        "TEXT": np.asarray(texts, dtype=object).reshape(-1, 1),
        "LINES": np.asarray(lines, dtype=object).reshape(-1, 1),
    }
