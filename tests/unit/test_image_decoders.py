"""The image decoders' shared logic without a GPU: the batch interface of the host decoder, and
the PyTorch geometry the GPU decoder applies after nvJPEG, against Pillow's (the host path, the
reference). The nvJPEG decoding itself runs in tests/gpu/test_gpu_image.py."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image, ImageOps

from reference_data import photos
from tritonrepo.image import spec
from tritonrepo.image.decoders import HostDecoder, crop_resize_normalise, orient, orientation
from tritonrepo.image.preprocess import decode_image, image_to_array, open_batch
from tritonrepo.step.errors import InvalidRequest

PREP = spec.EFFICIENTNET_LITE0


def jpeg(image: Image.Image, exif_orientation: int | None = None) -> bytes:
    buffer = io.BytesIO()
    exif = Image.Exif()
    if exif_orientation is not None:
        exif[0x0112] = exif_orientation
    image.save(buffer, "JPEG", quality=95, exif=exif.tobytes())
    return buffer.getvalue()


@pytest.mark.parametrize("value", range(1, 9))
def test_orient_turns_pixels_as_pillows_exif_transpose(value):
    """A 24 x 16 image of random pixels stored with orientation ``value``: Pillow's upright
    image equals the stored pixels turned by :func:`orient`, pixel for pixel."""
    rng = np.random.default_rng(value)
    stored = Image.fromarray(rng.integers(0, 256, (16, 24, 3), dtype=np.uint8))
    image = Image.open(io.BytesIO(jpeg(stored, value)))
    assert orientation(image) == value
    want = np.asarray(ImageOps.exif_transpose(image)).transpose(2, 0, 1)
    raw = torch.from_numpy(np.asarray(image).transpose(2, 0, 1).copy())
    assert np.array_equal(orient(raw, value).numpy(), want)


def test_crop_resize_normalise_follows_pillow_within_rounding():
    """The bundled photos decoded by Pillow at full size: PyTorch's crop, antialiased bicubic
    resize and normalisation against the host path's (Pillow's fixed-point resampling) on the
    same pixels: the same to a rounding (mean difference under a third of a level, 99 % of the
    values within one level)."""
    level = 1.0 / PREP.std[0]
    diffs = []
    for name in photos.PHOTOS:
        image = decode_image(photos.photo_file(name))  # no reduced-scale decoding
        want = image_to_array(image, PREP)
        pixels = torch.from_numpy(np.asarray(image).transpose(2, 0, 1).copy())
        got = crop_resize_normalise(pixels, PREP).numpy()
        assert got.shape == want.shape == (3, PREP.size, PREP.size)
        diffs.append(np.abs(got - want).reshape(-1) / level)
    every = np.concatenate(diffs)
    assert every.mean() < 0.34, every.mean()
    assert np.quantile(every, 0.99) <= 1.0 + 1e-4


def test_host_decoder_answers_each_request_or_its_error():
    good = photos.photo_file(next(iter(photos.PHOTOS)))
    cut = good[: len(good) // 2]  # a header that reads, a body that ends early
    requests = [open_batch([good, good]), open_batch([good, cut]), open_batch([])]
    first, second, empty = HostDecoder(PREP).decode(requests)
    assert isinstance(first, np.ndarray) and first.shape == (2, 3, PREP.size, PREP.size)
    assert isinstance(second, InvalidRequest) and str(second).startswith("IMAGE[1] ")
    assert "truncated JPEG" in str(second)
    assert isinstance(empty, np.ndarray) and empty.shape == (0, 3, PREP.size, PREP.size)
