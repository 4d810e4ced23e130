"""Pre/postprocessing: NudeNet's own letterbox + blob and decode + NMS, batch-first."""

import io
import json

import cv2
import numpy as np
from nudenet.nudenet import _postprocess, _read_image
from PIL import Image

SIZE = 320  # the core model's input height and width
MAX_BYTES = 20 * 2**20  # an encoded image, at most
# NudeNet pads an image to a square of its longer side before resizing it, so a W x 1 PNG of
# 100 bytes would take W² x 3 bytes of memory: the longer side is capped (8192: 200 MB).
MAX_SIDE = 8192
# The padded squares of one call's images, in pixels, at most: two of the largest (2 x 8192²,
# 400 MB of BGR). Without it 32 images at the side limit in one request would take 6.4 GB and
# hold a stub for minutes. A request over it is refused from the headers, before decoding.
MAX_BATCH_PIXELS = 2 * MAX_SIDE**2


def _header_side(data: bytes, i: int) -> int:
    """The longer side ``IMAGE[i]``'s header declares, or 0 for a format Pillow does not read
    (OpenCV decides, after decoding)."""
    try:
        return max(Image.open(io.BytesIO(data)).size)  # the header only
    except Image.DecompressionBombError as e:  # Pillow's own pixel limit, far over ours
        raise ValueError(f"IMAGE[{i}] is too large: {e}") from None
    except Exception:
        return 0


def _check_budget(sides: list[int], i: int) -> None:
    padded = sum(side * side for side in sides)
    if padded > MAX_BATCH_PIXELS:
        raise ValueError(
            f"IMAGE[{i}] puts the request over its decoding budget: its images pad to "
            f"{padded:,} pixels, over the limit of {MAX_BATCH_PIXELS:,} per request "
            f"(MAX_BATCH_PIXELS: each image is padded to a square of its longer side); send "
            "fewer or smaller images per request"
        )


def preprocess(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Decode and letterbox each image exactly as ``NudeDetector.detect`` does.

    Args:
        inputs: ``IMAGE`` object [b, 1] of encoded image ``bytes``.

    Returns:
        ``images`` FP32 [b, 3, 320, 320] (the model input) and ``LETTERBOX`` INT32 [b, 4]
        (x_pad, y_pad, original width, original height, in pixels) for postprocess.

    Raises:
        ValueError: ``IMAGE[i]`` is not bytes, is empty or over ``MAX_BYTES``, has a side over
            ``MAX_SIDE``, is not 8-bit, or cannot be decoded as an image; or the images' padded
            squares (longer side², summed) are over ``MAX_BATCH_PIXELS``. Sizes come from the
            headers, before anything is decoded (after decoding, for a format Pillow does not
            read).
    """
    files = list(inputs["IMAGE"][:, 0])
    sides = []
    for i, data in enumerate(files):
        if not isinstance(data, bytes) or not data or len(data) > MAX_BYTES:
            raise ValueError(f"IMAGE[{i}] must be encoded image bytes, 1 to {MAX_BYTES} of them")
        sides.append(_header_side(data, i))
        if sides[i] > MAX_SIDE:
            raise ValueError(f"IMAGE[{i}] has a side of {sides[i]} pixels, over {MAX_SIDE}")
        _check_budget(sides, i)
    blobs, boxes = [], []
    for i, data in enumerate(files):
        try:
            mat = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
            if mat is None:
                raise ValueError(f"IMAGE[{i}] is not a decodable image ({len(data)} bytes)")
            if mat.dtype != np.uint8:  # 16-bit or float: NudeNet's 1/255 scaling is for 8-bit
                raise ValueError(f"IMAGE[{i}] is {mat.dtype}; send an 8-bit image")
            if max(mat.shape[:2]) > MAX_SIDE:
                raise ValueError(f"IMAGE[{i}] has a side over {MAX_SIDE} pixels")
            sides[i] = max(mat.shape[:2])  # as decoded (the header's side, or an unread one)
            _check_budget(sides, i)
            blob, _, _, x_pad, y_pad, width, height = _read_image(mat, SIZE)
        except cv2.error as e:
            raise ValueError(f"IMAGE[{i}] cannot be decoded or converted: {e}") from e
        blobs.append(blob[0])
        boxes.append((x_pad, y_pad, width, height))
    return {"images": np.stack(blobs), "LETTERBOX": np.array(boxes, np.int32)}


def postprocess(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Decode boxes, undo the letterbox and run NMS with NudeNet's ``_postprocess``.

    Args:
        inputs: ``output0`` FP32 [b, 22, 2100] (the model output) and ``LETTERBOX`` INT32 [b, 4].

    Returns:
        ``DETECTIONS`` object [b, 1] of UTF-8 JSON bytes (``NudeDetector.detect``'s list of
        ``{"class", "score", "box": [x, y, w, h]}``, box in original-image pixels) and
        ``COUNT`` INT32 [b, 1], the number of detections.
    """
    found = []
    boxes = inputs["LETTERBOX"].tolist()
    for out, (x_pad, y_pad, w, h) in zip(inputs["output0"], boxes, strict=True):
        ratios = (max(w, h) / w, max(w, h) / h)  # as _read_image; unused by _postprocess
        found.append(_postprocess([out[None]], x_pad, y_pad, *ratios, w, h, SIZE, SIZE))
    return {
        "DETECTIONS": np.array([[json.dumps(d).encode()] for d in found], dtype=object),
        "COUNT": np.array([[len(d)] for d in found], np.int32),
    }
