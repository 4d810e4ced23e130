"""Pre- and postprocessing of the digit_scans pipeline (plain numpy, batch-first)."""

import numpy as np

SIDE = 64  # pixels a side of a scan
# Mean and standard deviation of the training scans' pixels / 255 (pipelines.digit_scans.model).
MEAN, STD = 0.305, 0.325


def preprocess(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Scale the scans for the network.

    Args:
        inputs: ``IMAGE`` UINT8 ``[b, 64, 64]``, 0 white to 255 black.

    Returns:
        ``pixels`` FP32 ``[b, 1, 64, 64]``: ``(IMAGE / 255 - MEAN) / STD``.

    Raises:
        ValueError: the tensor is not ``[b, 64, 64]`` of UINT8, or a scan is one flat colour
            (nothing written on it: the message names the scan).
    """
    image = np.asarray(inputs["IMAGE"])
    if image.ndim != 3 or image.shape[1:] != (SIDE, SIDE) or image.dtype != np.uint8:
        raise ValueError(
            f"IMAGE must be UINT8 [b, {SIDE}, {SIDE}], got {image.dtype} {list(image.shape)}"
        )
    flat = np.flatnonzero(image.min(axis=(1, 2)) == image.max(axis=(1, 2)))
    if flat.size:
        i = int(flat[0])
        raise ValueError(f"IMAGE[{i}] is blank (every pixel {image[i, 0, 0]}): no digit to read")
    pixels = (image.astype(np.float32) / 255.0 - MEAN) / STD
    return {"pixels": pixels[:, None]}


def postprocess(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Turn the network's logits into the response.

    Args:
        inputs: ``output`` FP32 ``[b, 10]``, the logits of digits 0-9.

    Returns:
        ``DIGIT`` INT64 ``[b, 1]`` (the most likely digit) and ``PROBABILITIES`` FP32 ``[b, 10]``
        (softmax of the logits).
    """
    logits = np.asarray(inputs["output"], dtype=np.float32)
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return {
        "DIGIT": logits.argmax(axis=1).astype(np.int64).reshape(-1, 1),
        "PROBABILITIES": (shifted / shifted.sum(axis=1, keepdims=True)).astype(np.float32),
    }
