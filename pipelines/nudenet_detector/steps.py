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


def preprocess(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Decode and letterbox each image exactly as ``NudeDetector.detect`` does.

    Args:
        inputs: ``IMAGE`` object [b, 1] of encoded image ``bytes``.

    Returns:
        ``images`` FP32 [b, 3, 320, 320] (the model input) and ``LETTERBOX`` INT32 [b, 4]
        (x_pad, y_pad, original width, original height, in pixels) for postprocess.

    Raises:
        ValueError: ``IMAGE[i]`` is not bytes, is empty or over ``MAX_BYTES``, has a side over
            ``MAX_SIDE`` (read from its header, before decoding), is not 8-bit, or cannot be
            decoded as an image.
    """
    blobs, boxes = [], []
    for i, data in enumerate(inputs["IMAGE"][:, 0]):
        if not isinstance(data, bytes) or not data or len(data) > MAX_BYTES:
            raise ValueError(f"IMAGE[{i}] must be encoded image bytes, 1 to {MAX_BYTES} of them")
        try:
            side = max(Image.open(io.BytesIO(data)).size)  # the header only
        except Image.DecompressionBombError as e:  # Pillow's own pixel limit, far over ours
            raise ValueError(f"IMAGE[{i}] is too large: {e}") from None
        except Exception:
            side = 0  # a format Pillow does not read: OpenCV decides below
        if side > MAX_SIDE:
            raise ValueError(f"IMAGE[{i}] has a side of {side} pixels, over {MAX_SIDE}")
        try:
            mat = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
            if mat is None:
                raise ValueError(f"IMAGE[{i}] is not a decodable image ({len(data)} bytes)")
            if mat.dtype != np.uint8:  # 16-bit or float: NudeNet's 1/255 scaling is for 8-bit
                raise ValueError(f"IMAGE[{i}] is {mat.dtype}; send an 8-bit image")
            if max(mat.shape[:2]) > MAX_SIDE:
                raise ValueError(f"IMAGE[{i}] has a side over {MAX_SIDE} pixels")
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
