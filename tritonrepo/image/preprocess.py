"""Decode one encoded image file and turn it into a classifier's input: the one preprocessing
function that the served step (``image_preprocess``), the in-process PyTorch reference, the INT8
calibration and the benchmarks all call, so "same preprocessing" holds by construction.

Decoding (:func:`decode_image`) refuses before decoding anything: files over
``spec.MAX_IMAGE_BYTES``, formats other than JPEG/PNG/WebP, and images whose header declares
more than ``max_pixels`` pixels (default ``spec.MAX_IMAGE_PIXELS``), a side over
``spec.MAX_IMAGE_SIDE`` or an aspect ratio over ``spec.MAX_ASPECT_RATIO`` (Pillow's
``Image.open`` is lazy: the header gives the size, and ``load()`` runs only after the checks).
:func:`preprocess_batch` also holds a request's images to one decoding budget
(``max_request_pixels``, default ``spec.MAX_REQUEST_PIXELS``): the pixels every image will be
decoded at, read from all the headers before the first image is decoded. Then it applies the
EXIF orientation and
converts every mode to 8-bit RGB: grayscale and 1-bit to gray RGB, palette through its colours,
CMYK and YCbCr through Pillow's conversions, 16-bit grayscale scaled by 1/257, and transparent
images (RGBA, LA, PA, palette or RGB with a transparent colour) composited onto white.
A file that fails to open or decode and starts like a JPEG, PNG or WebP but lacks its end is
refused as truncated, with its size (:func:`truncation`).
"""

from __future__ import annotations

import contextlib
import io
import warnings
from collections.abc import Sequence

import numpy as np
from PIL import Image, ImageOps

from tritonrepo.image import spec
from tritonrepo.image.normalise import normalise
from tritonrepo.image.spec import Preprocessing
from tritonrepo.step.errors import InvalidRequest, OverLimit

# Pillow's decompression-bomb guard agrees with ours (it warns above the value and raises above
# twice it; both become a per-image error here). Set on import, i.e. in every process that
# decodes images for this package.
Image.MAX_IMAGE_PIXELS = spec.MAX_IMAGE_PIXELS

_RESAMPLING = {"bicubic": Image.Resampling.BICUBIC, "bilinear": Image.Resampling.BILINEAR}
_SIXTEEN_BIT_GRAY = ("I", "I;16", "I;16B", "I;16L", "I;16N")


def check_dimensions(width: int, height: int, max_pixels: int = spec.MAX_IMAGE_PIXELS) -> None:
    """Refuse an image by the size its header declares, before it is decoded.

    Args:
        width, height: the declared size, in pixels.
        max_pixels: the most pixels one image may declare (the step's ``max_image_pixels``).

    Raises:
        OverLimit: more than ``max_pixels`` pixels (a decompression bomb), a side over
            ``spec.MAX_IMAGE_SIDE``, a zero side, or an aspect ratio over
            ``spec.MAX_ASPECT_RATIO``.
    """
    if width < 1 or height < 1:
        raise OverLimit(f"declares {width}x{height} pixels: an image needs both sides >= 1")
    if width * height > max_pixels:
        raise OverLimit(
            f"declares {width}x{height} = {width * height:,} pixels, over the limit of "
            f"{max_pixels:,} ({_megapixels(max_pixels)}) per image (parameter max_image_pixels); "
            "refused before decoding (decompression bomb guard): downscale it first"
        )
    if max(width, height) > spec.MAX_IMAGE_SIDE:
        raise OverLimit(
            f"declares {width}x{height} pixels: a side over {spec.MAX_IMAGE_SIDE} pixels"
        )
    if max(width, height) > spec.MAX_ASPECT_RATIO * min(width, height):
        raise OverLimit(
            f"declares {width}x{height} pixels: aspect ratio over {spec.MAX_ASPECT_RATIO}:1"
        )


def _megapixels(pixels: int) -> str:
    return f"{pixels / 1e6:g} MP"


def open_image(
    data: bytes, min_side: int | None = None, max_pixels: int = spec.MAX_IMAGE_PIXELS
) -> Image.Image:
    """Open one encoded file and check its header; nothing is decoded yet.

    Args:
        data: the file's bytes (JPEG, PNG or WebP).
        min_side: when set, a large JPEG is set to decode at a reduced scale (1/2, 1/4, 1/8,
            DCT scaling) whose shorter side is still at least this many pixels.
        max_pixels: the most pixels the header may declare (:func:`check_dimensions`).

    Returns:
        A lazy Pillow image whose ``size`` is the size :func:`load_image` will decode it at
        (the reduced one for a JPEG that ``min_side`` lets shrink), so ``width * height`` is
        the decoding cost in pixels before any pixel is decoded.

    Raises:
        OverLimit: over ``spec.MAX_IMAGE_BYTES`` or a header limit.
        InvalidRequest: empty, not an image of an accepted format, or an unreadable header.
    """
    if len(data) == 0:
        raise InvalidRequest("is an empty file (0 bytes)")
    if len(data) > spec.MAX_IMAGE_BYTES:
        raise OverLimit(
            f"is {len(data):,} bytes, over the limit of {spec.MAX_IMAGE_BYTES:,} bytes (20 MiB) "
            "per image"
        )
    with warnings.catch_warnings():
        # Between 1x and 2x Image.MAX_IMAGE_PIXELS Pillow only warns; check_dimensions refuses
        # those below with the size in its message. Above 2x Pillow raises before returning.
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            image = Image.open(io.BytesIO(data), formats=spec.FORMATS)
        except Image.DecompressionBombError as exc:
            raise OverLimit(
                f"is over the limit of {max_pixels:,} pixels ({_megapixels(max_pixels)}) per "
                "image (parameter max_image_pixels); refused before decoding (decompression "
                f"bomb guard: {exc})"
            ) from exc
        except Image.UnidentifiedImageError as exc:
            truncated = truncation(data)
            if truncated:
                raise InvalidRequest(truncated) from exc
            if _format(data) != "image":  # the signature of one, a header Pillow cannot read
                raise InvalidRequest(
                    f"has an unreadable {_format(data)} header ({len(data):,} bytes): corrupt file"
                ) from exc
            raise InvalidRequest(
                f"is not a JPEG, PNG or WebP image ({len(data):,} bytes starting {data[:8]!r})"
            ) from exc
        except (OSError, SyntaxError, ValueError) as exc:  # broken headers
            truncated = truncation(data)
            if truncated:
                raise InvalidRequest(truncated) from exc
            raise InvalidRequest(f"has an unreadable {_format(data)} header: {exc}") from exc
    check_dimensions(*image.size, max_pixels=max_pixels)
    if min_side is not None and image.format == "JPEG":
        # DCT scaling: decode at 1/2, 1/4 or 1/8 while the shorter side stays >= min_side.
        scale = min_side / min(image.size)
        if scale < 0.5:
            image.draft("RGB", (int(image.size[0] * scale) + 1, int(image.size[1] * scale) + 1))
    return image


def load_image(image: Image.Image, data: bytes) -> Image.Image:
    """Decode an image from :func:`open_image` (``data``: its file, to name a truncation).

    Raises:
        InvalidRequest: truncated or corrupt.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            image.load()
        except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
            truncated = truncation(data)
            if truncated:
                raise InvalidRequest(truncated) from exc
            raise InvalidRequest(
                f"could not be decoded as {image.format}: {exc} (truncated or corrupt file?)"
            ) from exc
    return image


# Signatures and end markers of the accepted formats: PNG ends with its IEND chunk (PNG
# specification, 3rd ed., 5.2 and 11.2.5: length 0, type, CRC); JPEG with the EOI marker
# (ITU-T T.81, B.2.1); a RIFF file's bytes 4..8 give its size minus 8, little-endian (WebP
# container specification, "RIFF header").
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PNG_END = b"\x00\x00\x00\x00IEND\xaeB`\x82"
JPEG_SIGNATURE = b"\xff\xd8\xff"
JPEG_END = b"\xff\xd9"


def truncation(data: bytes) -> str | None:
    """A sentence saying that ``data`` is a cut-off JPEG, PNG or WebP file, or None.

    A file is truncated when it starts with a format's signature (or is shorter than the
    signature and a prefix of it) but lacks the format's end: PNG's IEND chunk, JPEG's EOI
    marker, or the size a WebP's RIFF header declares. Such a file fails to decode; this names
    the cause instead of calling it "not an image".
    """
    n = len(data)
    if data.startswith(PNG_SIGNATURE) or (
        n < len(PNG_SIGNATURE) and PNG_SIGNATURE.startswith(data)
    ):
        if not data.endswith(PNG_END):
            return (
                f"is a truncated PNG image ({n:,} bytes; a PNG ends with an IEND chunk): "
                "send the whole file"
            )
        return None
    if data.startswith(JPEG_SIGNATURE) or (
        n < len(JPEG_SIGNATURE) and data.startswith(b"\xff\xd8")
    ):
        # A JPEG may carry bytes after EOI; only a file with no EOI at all is called cut off.
        if JPEG_END not in data[2:]:
            return (
                f"is a truncated JPEG image ({n:,} bytes; a JPEG ends with an EOI marker): "
                "send the whole file"
            )
        return None
    if data.startswith(b"RIFF") and data[8:12] == b"WEBP":
        declared = int.from_bytes(data[4:8], "little") + 8
        if n < declared:
            return (
                f"is a truncated WebP image ({n:,} bytes of the {declared:,} its RIFF header "
                "declares): send the whole file"
            )
    return None


def _format(data: bytes) -> str:
    for magic, name in ((b"\xff\xd8", "JPEG"), (b"\x89PNG", "PNG")):
        if data.startswith(magic):
            return name
    return "WebP" if data.startswith(b"RIFF") and data[8:12] == b"WEBP" else "image"


def to_rgb(image: Image.Image) -> Image.Image:
    """Any decoded Pillow image as 8-bit RGB (see the module docstring for each mode)."""
    if image.mode in _SIXTEEN_BIT_GRAY:
        gray = np.asarray(image, dtype=np.float64)
        image = Image.fromarray(np.clip(np.rint(gray / 257.0), 0, 255).astype(np.uint8), "L")
    elif image.mode == "F":
        image = Image.fromarray(np.clip(np.rint(np.asarray(image)), 0, 255).astype(np.uint8))
    has_alpha = image.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in image.info
    if has_alpha:
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return image if image.mode == "RGB" else image.convert("RGB")


def decode_image(
    data: bytes, min_side: int | None = None, max_pixels: int = spec.MAX_IMAGE_PIXELS
) -> Image.Image:
    """Decode one encoded file into an upright 8-bit RGB Pillow image.

    Args:
        data: the file's bytes (JPEG, PNG or WebP).
        min_side: when set, a large JPEG may be decoded at a reduced scale (1/2, 1/4, 1/8)
            whose shorter side is still at least this many pixels (faster, same crop).
        max_pixels: the most pixels its header may declare.

    Raises:
        OverLimit: over a size limit (``spec``, ``max_pixels``), checked before decoding.
        InvalidRequest: empty, not an image of an accepted format, truncated or corrupt.
    """
    return decode_opened(open_image(data, min_side, max_pixels), data)


def _upright_rgb(image: Image.Image) -> Image.Image:
    with contextlib.suppress(Exception):  # a broken EXIF block: keep the image as stored
        image = ImageOps.exif_transpose(image)
    return to_rgb(image)


def decode_opened(image: Image.Image, data: bytes) -> Image.Image:
    """Decode an image :func:`open_image` checked (``data``: its file) into upright 8-bit RGB.

    Raises:
        InvalidRequest: truncated or corrupt.
    """
    return _upright_rgb(load_image(image, data))


def crop_box(width: int, height: int, prep: Preprocessing) -> tuple[int, int, int]:
    """``(left, top, side)`` of the centred square an image of ``width`` x ``height`` pixels is
    cropped to: side ``int(prep.crop_pct * shorter side)`` (at least 1), offset
    ``(side - crop + 1) // 2`` as in the TensorFlow EfficientNet preprocessing."""
    crop = max(1, int(prep.crop_pct * min(width, height)))
    return (width - crop + 1) // 2, (height - crop + 1) // 2, crop


def crop_resize(image: Image.Image, prep: Preprocessing) -> np.ndarray:
    """Centre crop (:func:`crop_box`) and resize an RGB image to ``prep.size`` square with
    ``prep.interpolation``.

    Returns:
        uint8 ``[prep.size, prep.size, 3]`` (HWC, RGB).
    """
    left, top, crop = crop_box(*image.size, prep)
    resized = image.resize(
        (prep.size, prep.size),
        resample=_RESAMPLING[prep.interpolation],
        box=(left, top, left + crop, top + crop),
    )
    return np.asarray(resized, dtype=np.uint8)


def image_to_array(image: Image.Image, prep: Preprocessing) -> np.ndarray:
    """:func:`crop_resize` then :func:`normalise`: FP32 ``[3, prep.size, prep.size]``."""
    return normalise(crop_resize(image, prep), prep)


def _min_side(prep: Preprocessing) -> int:
    """The shorter side an image needs for ``prep``'s crop (a JPEG may decode down to it)."""
    return int(np.ceil(prep.size / prep.crop_pct))


def preprocess_image(
    data: bytes,
    prep: Preprocessing = spec.EFFICIENTNET_LITE0,
    max_pixels: int = spec.MAX_IMAGE_PIXELS,
) -> np.ndarray:
    """One encoded file → FP32 ``[3, size, size]`` model input (decode + crop + normalise).

    Raises:
        OverLimit, InvalidRequest: as :func:`decode_image`.
    """
    return image_to_array(decode_image(data, _min_side(prep), max_pixels), prep)


def open_batch(
    files: Sequence[bytes],
    prep: Preprocessing = spec.EFFICIENTNET_LITE0,
    name: str = "IMAGE",
    max_pixels: int = spec.MAX_IMAGE_PIXELS,
    max_request_pixels: int = spec.MAX_REQUEST_PIXELS,
) -> list[tuple[Image.Image, bytes]]:
    """Read and check every header of one request's files; nothing is decoded.

    The pixels the images will be decoded at (a JPEG at its reduced scale) are summed, and a
    request over ``max_request_pixels`` is refused whole.

    Args:
        files: the request's encoded files.
        prep: the model's preprocessing (a JPEG may be set to decode down to its crop's size).
        name: the input's name, used in messages (``IMAGE[i]``).
        max_pixels: the most pixels one image's header may declare (``max_image_pixels``).
        max_request_pixels: the most pixels the request's images may need decoded in all
            (``max_request_pixels``).

    Returns:
        ``(lazy Pillow image, file bytes)`` per file, in order (:func:`open_image`).

    Raises:
        OverLimit, InvalidRequest: for the first bad header, its message prefixed with
            ``IMAGE[i]`` (``name`` and its index); OverLimit over ``max_request_pixels``,
            naming the first image that crosses it, the images' count and their pixels.
    """
    min_side = _min_side(prep)
    opened, total, first_over = [], 0, None
    for i, file in enumerate(files):
        data = bytes(file)
        try:
            image = open_image(data, min_side, max_pixels)
        except InvalidRequest as exc:
            raise type(exc)(f"{name}[{i}] {exc}") from exc
        opened.append((image, data))
        total += image.size[0] * image.size[1]
        if total > max_request_pixels and first_over is None:
            first_over = i
    if first_over is not None:
        raise OverLimit(
            f"{name}[{first_over}] puts the request over its decoding budget: its "
            f"{len(files)} images need {total:,} pixels decoded, over the limit of "
            f"{max_request_pixels:,} ({_megapixels(max_request_pixels)}) per request (parameter "
            "max_request_pixels); refused before decoding: send fewer or smaller images per "
            "request"
        )
    return opened


def decode_one(image: Image.Image, data: bytes, prep: Preprocessing, label: str) -> np.ndarray:
    """One image :func:`open_image` checked → FP32 ``[3, size, size]`` (:func:`decode_opened`
    then :func:`image_to_array`).

    Raises:
        InvalidRequest: it does not decode; the message starts with ``label`` (``IMAGE[i]``).
    """
    try:
        return image_to_array(decode_opened(image, data), prep)
    except InvalidRequest as exc:
        raise type(exc)(f"{label} {exc}") from exc


def decode_batch(
    opened: Sequence[tuple[Image.Image, bytes]],
    prep: Preprocessing = spec.EFFICIENTNET_LITE0,
    name: str = "IMAGE",
) -> np.ndarray:
    """Decode the images :func:`open_batch` checked, on this host's core: FP32
    ``[n, 3, size, size]``.

    Raises:
        InvalidRequest: for the first image that fails to decode, prefixed ``IMAGE[i]``.
    """
    arrays = [
        decode_one(image, data, prep, f"{name}[{i}]") for i, (image, data) in enumerate(opened)
    ]
    return np.stack(arrays) if arrays else np.zeros((0, 3, prep.size, prep.size), np.float32)


def preprocess_batch(
    files: Sequence[bytes],
    prep: Preprocessing = spec.EFFICIENTNET_LITE0,
    name: str = "IMAGE",
    max_pixels: int = spec.MAX_IMAGE_PIXELS,
    max_request_pixels: int = spec.MAX_REQUEST_PIXELS,
) -> np.ndarray:
    """One request's encoded files → FP32 ``[n, 3, size, size]``: every header checked first
    (:func:`open_batch`), then each image decoded (:func:`decode_batch`).

    Raises:
        OverLimit, InvalidRequest: as :func:`open_batch` and :func:`decode_batch`.
    """
    opened = open_batch(files, prep, name, max_pixels, max_request_pixels)
    return decode_batch(opened, prep, name)
