"""image_classification logic without a server: decoding (EXIF, modes, limits), preprocessing,
postprocessing, labels."""

from __future__ import annotations

import io
import re
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from reference_data import photos
from tritonrepo.image import spec
from tritonrepo.image.postprocess import check_top_k, softmax, top_k
from tritonrepo.image.preprocess import (
    decode_image,
    image_to_array,
    preprocess_batch,
    preprocess_image,
)
from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.step.errors import InvalidRequest, OverLimit


def _file(image: Image.Image, fmt: str = "PNG", **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def png_header(width: int, height: int) -> bytes:
    """A PNG whose IHDR declares ``width`` x ``height`` (8-bit RGB) with one tiny IDAT: enough
    for Pillow to read the size, far too little to decode."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\x00" * 64)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


@pytest.fixture(scope="module")
def cat() -> np.ndarray:
    return photos.photo_array("chelsea")


def test_formats_decode_to_the_same_rgb(cat):
    png = decode_image(photos.encode(cat, "PNG"))
    webp = decode_image(photos.encode(cat, "WEBP", lossless=True))
    assert png.mode == webp.mode == "RGB" and png.size == (cat.shape[1], cat.shape[0])
    assert np.array_equal(np.asarray(png), cat) and np.array_equal(np.asarray(webp), cat)


def test_exif_orientation_is_applied(cat):
    image = Image.fromarray(cat)
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90° clockwise to display
    decoded = decode_image(_file(image, "JPEG", exif=exif, quality=95))
    assert decoded.size == (cat.shape[0], cat.shape[1])  # upright: width and height swapped
    upright = decode_image(_file(image.transpose(Image.Transpose.ROTATE_270), "JPEG", quality=95))
    assert np.abs(np.asarray(decoded, np.float32) - np.asarray(upright, np.float32)).mean() < 3


@pytest.mark.parametrize(
    "mode",
    ["L", "1", "P", "RGBA", "LA", "CMYK", "I;16", "P-tRNS"],
    ids=lambda m: m.replace(";", ""),
)
def test_every_mode_becomes_rgb(cat, mode):
    base = Image.fromarray(cat)
    if mode == "I;16":
        gray = np.asarray(base.convert("L"), dtype=np.uint16) * 257
        image, fmt = Image.fromarray(gray), "PNG"  # mode I;16
    elif mode == "CMYK":
        image, fmt = base.convert("CMYK"), "JPEG"
    elif mode == "P-tRNS":  # palette with a transparent colour
        image, fmt = base.convert("P"), "PNG"
        decoded = decode_image(_file(image, fmt, transparency=0))
        assert decoded.mode == "RGB" and decoded.size == base.size
        return
    else:
        image, fmt = base.convert(mode), "PNG"
    decoded = decode_image(_file(image, fmt))
    assert decoded.mode == "RGB" and decoded.size == base.size
    if mode == "I;16":  # 16-bit gray scaled by 1/257: exactly the 8-bit gray
        assert np.array_equal(np.asarray(decoded)[..., 0], np.asarray(base.convert("L")))


def test_transparency_is_composited_on_white():
    rgba = np.zeros((40, 40, 4), np.uint8)  # fully transparent black
    decoded = decode_image(_file(Image.fromarray(rgba, "RGBA")))
    assert np.all(np.asarray(decoded) == 255)


def test_preprocessing_shape_and_normalisation(cat):
    pixels = preprocess_image(photos.encode(cat, "PNG"))
    assert pixels.shape == (3, 224, 224) and pixels.dtype == np.float32
    assert pixels.min() >= (0 - 127) / 128 and pixels.max() <= (255 - 127) / 128
    flat = image_to_array(Image.new("RGB", (300, 200), (127, 255, 0)), spec.EFFICIENTNET_LITE0)
    assert np.allclose(flat[:, 0, 0], [0.0, 1.0, -127 / 128])


@pytest.mark.parametrize(
    ("data", "error", "message"),
    [
        (b"", InvalidRequest, "empty file"),
        (b"%PDF-1.7 not an image at all", InvalidRequest, "not a JPEG, PNG or WebP"),
        (png_header(8000, 8000), OverLimit, "over the limit of 40,000,000"),  # 64 MP bomb
        (png_header(100_000, 100_000), OverLimit, "decompression bomb"),
        (png_header(20_000, 10), OverLimit, "a side over 16383"),
        (png_header(3000, 10), OverLimit, "aspect ratio"),
        (b"\x00" * (spec.MAX_IMAGE_BYTES + 1), OverLimit, "over the limit of 20,971,520 bytes"),
    ],
    ids=["empty", "non-image", "bomb-64MP", "bomb-10GP", "absurd-side", "absurd-aspect", "big"],
)
def test_bad_files_are_refused_with_a_clear_error(data, error, message):
    with pytest.raises(error, match=message):
        preprocess_image(data)


def test_truncated_files_are_refused(cat):
    for fmt in ("JPEG", "PNG", "WEBP"):
        data = photos.encode(cat, fmt)
        with pytest.raises(InvalidRequest, match=r"truncated|could not be decoded|unreadable"):
            preprocess_image(data[: len(data) // 2])


def test_batch_error_names_the_image(cat):
    good = photos.encode(cat)
    with pytest.raises(InvalidRequest, match=r"^IMAGE\[1\] is an empty file"):
        preprocess_batch([good, b"", good])
    assert preprocess_batch([good, good]).shape == (2, 3, 224, 224)


def test_softmax_top_k_and_top_k_checks():
    logits = np.array([[0.0, 2.0, 1.0, 2.0]], np.float32)
    indices, probs = top_k(logits, 3)
    assert indices.tolist() == [[1, 3, 2]]  # ties: lower index first
    assert np.allclose(probs, softmax(logits)[:, [1, 3, 2]]) and probs.dtype == np.float32
    assert np.isclose(softmax(np.array([[1000.0, 0.0]])).sum(), 1.0)
    assert check_top_k(None) == spec.DEFAULT_TOP_K
    assert check_top_k(np.array([[5000]], np.int32)) == spec.NUM_CLASSES
    with pytest.raises(InvalidRequest, match="TOP_K must be > 0"):
        check_top_k(np.array([[0]], np.int32))
    with pytest.raises(InvalidRequest, match="the same for every image"):
        check_top_k(np.array([[1], [2]], np.int32))


def test_preflight_names_a_missing_labels_file(tmp_path):
    import shutil

    from tritonrepo.server.artifact_checks import check_model

    model = spec.POSTPROCESS_MODEL
    shutil.copytree(
        MODEL_REPOSITORY / model,
        tmp_path / model,
        ignore=shutil.ignore_patterns(spec.LABELS_FILE, "__pycache__"),
    )
    lines = [f.line() for f in check_model(tmp_path, model, "cpu")]
    assert f"error   {model}: 1/labels.txt is missing; build it with `make artifacts`" in lines


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "WEBP"])
@pytest.mark.parametrize("size", [4, 8, 20, 30, 33, 36, 40, 60])
def test_a_file_cut_short_is_called_truncated_with_its_size(cat, fmt, size):
    """A cut PNG of 30..40 bytes has the PNG signature and a whole or partial IHDR, which
    Pillow cannot identify: it must be named a truncated PNG, not "not an image"."""
    data = photos.encode(cat, fmt)[:size]
    name = {"WEBP": "WebP"}.get(fmt, fmt)
    if fmt == "WEBP" and size < 12:  # "RIFF" and a size only: no WebP marker yet
        with pytest.raises(InvalidRequest, match="not a JPEG, PNG or WebP"):
            decode_image(data)
        return
    with pytest.raises(InvalidRequest, match=rf"^is a truncated {name} image \({size} bytes"):
        decode_image(data)


def test_a_whole_png_with_broken_bytes_is_called_corrupt_not_truncated(cat):
    whole = photos.encode(cat, "PNG")
    header = bytearray(whole)
    header[16:24] = b"\xff" * 8  # IHDR's width and height overwritten: its CRC fails
    middle = bytearray(whole)
    middle[len(whole) // 2 : len(whole) // 2 + 64] = b"\x00" * 64  # IDAT data destroyed
    for data, message in ((header, "unreadable PNG header"), (middle, "could not be decoded")):
        with pytest.raises(InvalidRequest, match=message) as refused:
            decode_image(bytes(data))
        assert "truncated PNG" not in str(refused.value)
        assert "not a JPEG, PNG or WebP" not in str(refused.value)


def test_a_request_over_its_decoding_budget_is_refused_before_decoding():
    """32 single-colour 6324 x 6324 PNGs (40.0 MP each, under the per-image limit) held a stub
    for 24 s. Their headers alone now refuse the request: the files here hold a few bytes of
    pixel data, so decoding them would fail as corrupt instead of reporting the budget."""
    bomb = png_header(6324, 6324)
    with pytest.raises(OverLimit) as refused:
        preprocess_batch([bomb] * 32)
    message = str(refused.value)
    assert message.startswith("IMAGE[3] puts the request over its decoding budget"), message
    assert f"its 32 images need {32 * 6324 * 6324:,} pixels decoded" in message
    assert f"over the limit of {spec.MAX_REQUEST_PIXELS:,}" in message
    assert "max_request_pixels" in message
    # Within the budget the same files reach the decoder (which finds them corrupt).
    with pytest.raises(InvalidRequest, match=r"^IMAGE\[0\] could not be decoded") as decoded:
        preprocess_batch([bomb] * 3)
    assert not isinstance(decoded.value, OverLimit)


def test_the_request_budget_sums_the_pixels_decoded(cat):
    good = photos.encode(cat)
    pixels = cat.shape[0] * cat.shape[1]
    assert preprocess_batch([good, good], max_request_pixels=2 * pixels).shape[0] == 2
    with pytest.raises(OverLimit, match=rf"^IMAGE\[2\] .* its 3 images need {3 * pixels:,} pixels"):
        preprocess_batch([good, good, good], max_request_pixels=2 * pixels)
    # A bad image is named as before, whatever the budget.
    with pytest.raises(InvalidRequest, match=r"^IMAGE\[1\] is an empty file"):
        preprocess_batch([good, b"", good], max_request_pixels=1)


def test_a_jpeg_counts_at_the_scale_it_is_decoded_at():
    """A 4000 x 3000 JPEG decodes at 1/8 scale (500 x 375, shorter side still >= 256): 187,500
    pixels of the budget. The same image as a PNG is decoded whole: 12,000,000."""
    photo = Image.new("RGB", (4000, 3000), (90, 140, 200))
    jpeg, png = _file(photo, "JPEG", quality=90), _file(photo, "PNG")
    assert preprocess_batch([jpeg], max_request_pixels=500 * 375).shape == (1, 3, 224, 224)
    with pytest.raises(OverLimit, match=r"its 1 images need 12,000,000 pixels decoded"):
        preprocess_batch([png], max_request_pixels=1_000_000)


def test_the_per_image_limit_is_a_parameter(cat):
    good = photos.encode(cat)
    pixels = cat.shape[0] * cat.shape[1]
    assert preprocess_batch([good], max_pixels=pixels).shape[0] == 1
    with pytest.raises(
        OverLimit, match=rf"^IMAGE\[0\] declares .* over the limit of {pixels - 1:,}"
    ):
        preprocess_batch([good], max_pixels=pixels - 1)


def test_the_configs_set_the_limits_the_step_declares():
    from tritonrepo.image.steps import PreprocessStep
    from tritonrepo.step.parameters import parse

    declared = {p.name: p for p in PreprocessStep.PARAMETERS}
    assert declared["max_image_pixels"].default == spec.MAX_IMAGE_PIXELS == 40_000_000
    assert declared["max_request_pixels"].default == spec.MAX_REQUEST_PIXELS == 120_000_000
    assert spec.MAX_REQUEST_PIXELS >= spec.MAX_IMAGE_PIXELS  # the largest image passes alone
    folder = MODEL_REPOSITORY / spec.PREPROCESS_MODEL
    for path in (folder / "config.pbtxt", *sorted((folder / "configs").glob("*.pbtxt"))):
        values = dict(
            re.findall(r'parameters \{ key: "(\w+)" value \{ string_value: "([^"]*)" \} \}',
                       path.read_text())
        )  # fmt: skip
        settings = parse(PreprocessStep.PARAMETERS, values, path.name)
        assert settings["max_image_pixels"] == 40_000_000, path
        assert settings["max_request_pixels"] == 120_000_000, path
