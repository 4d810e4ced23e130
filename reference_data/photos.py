"""Real photographs for tests, INT8 calibration and benchmarks: the images that ship with
scikit-image (``skimage.data``; no download), encoded as files the way clients send them.

``PHOTOS`` are the named test photos with the ImageNet classes a person would accept in their
top-5; ``EXTRA`` are the other bundled photographs and micrographs (calibration only).
"""

from __future__ import annotations

import io

import numpy as np

# name -> ImageNet class indices that count as right for that photo (top-1 or top-5 checks).
PHOTOS: dict[str, tuple[int, ...]] = {
    "chelsea": (281, 282, 283, 284, 285),  # a tabby cat: the cat classes
    "coffee": (504, 967, 968, 809),  # coffee mug, espresso, cup, soup bowl
    "rocket": (812, 657, 744),  # space shuttle, missile, projectile
    "astronaut": (518, 560, 837, 617, 834, 869),  # crash helmet, football helmet, sunglasses,
    # lab coat, suit, trench coat: an astronaut in a space suit; any of these in the top-5
    "camera": (872, 759, 650),  # tripod, reflex camera, microphone (the cameraman)
}
EXTRA = ("hubble_deep_field", "immunohistochemistry", "retina", "clock", "coins", "colorwheel")


def photo_array(name: str) -> np.ndarray:
    """``skimage.data.<name>()`` as uint8 ``[h, w, 3]`` (grayscale repeated to RGB)."""
    import skimage.data

    image = np.asarray(getattr(skimage.data, name)())
    if image.dtype != np.uint8:
        image = (np.clip(image, 0, 1) * 255).astype(np.uint8)
    if image.ndim == 2:
        image = np.repeat(image[..., None], 3, axis=2)
    return image[..., :3]


def encode(image: np.ndarray, fmt: str = "JPEG", **options) -> bytes:
    """uint8 ``[h, w, 3]`` (or ``[h, w]``) → the bytes of a ``fmt`` file (a Pillow format)."""
    from PIL import Image

    buffer = io.BytesIO()
    defaults = {"quality": 95} if fmt == "JPEG" else {}
    Image.fromarray(image).save(buffer, fmt, **(defaults | options))
    return buffer.getvalue()


def photo_file(name: str, fmt: str = "JPEG") -> bytes:
    """A bundled photo as an encoded file (JPEG quality 95 by default)."""
    return encode(photo_array(name), fmt)


def augmented_files(count: int, seed: int) -> list[bytes]:
    """``count`` JPEG files made from every bundled photo (``PHOTOS`` and ``EXTRA``, in turn) by
    a random crop (50-100 % of each side), a horizontal flip half the time, and a brightness /
    contrast change of up to ±20 %, drawn with ``seed``: real image statistics for INT8
    calibration (one seed) and its agreement check (another seed), never random tensors."""
    rng = np.random.default_rng(seed)
    names = list(PHOTOS) + list(EXTRA)
    sources = {name: photo_array(name) for name in names}
    files = []
    for i in range(count):
        image = sources[names[i % len(names)]]
        h, w = image.shape[:2]
        ch, cw = int(h * rng.uniform(0.5, 1.0)), int(w * rng.uniform(0.5, 1.0))
        top, left = rng.integers(0, h - ch + 1), rng.integers(0, w - cw + 1)
        crop = image[top : top + ch, left : left + cw].astype(np.float32)
        if rng.random() < 0.5:
            crop = crop[:, ::-1]
        crop = (crop - 128.0) * rng.uniform(0.8, 1.2) + 128.0 * rng.uniform(0.8, 1.2)
        files.append(encode(np.clip(crop, 0, 255).astype(np.uint8)))
    return files
