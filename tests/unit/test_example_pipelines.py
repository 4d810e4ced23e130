"""The example pipelines' own input checks (``pipelines/breast_cancer``,
``pipelines/nudenet_detector``, ``pipelines/click_lightgbm``), found by attacking the served
pipelines: each hostile input is refused with a ``ValueError`` (that request's INVALID_ARG
error) before it costs memory."""

from __future__ import annotations

import resource
import struct
import zlib

import cv2
import numpy as np
import pytest

from pipelines.breast_cancer.steps import preprocess as breast_cancer_preprocess
from pipelines.click_lightgbm.steps import COLUMNS
from pipelines.click_lightgbm.steps import preprocess as click_preprocess
from pipelines.nudenet_detector.steps import MAX_BATCH_PIXELS, MAX_SIDE
from pipelines.nudenet_detector.steps import preprocess as nudenet_preprocess


def zero_png(width: int, height: int) -> bytes:
    """An all-zero 8-bit gray PNG of ``width`` x ``height`` pixels, a few hundred bytes to a
    few MB however large it decodes."""
    deflate = zlib.compressobj(9)
    data = b"".join(deflate.compress(b"\0" * (width + 1)) for _ in range(height)) + deflate.flush()

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", data) + chunk(b"IEND", b"")
    )


def image_request(data: bytes) -> dict[str, np.ndarray]:
    return {"IMAGE": np.array([[data]], dtype=object)}


@pytest.mark.parametrize(
    ("width", "height", "message"),
    [
        (30000, 1, "has a side of 30000 pixels"),  # NudeNet would pad it to 30000² x 3 bytes
        (1, 30000, "has a side of 30000 pixels"),
        (MAX_SIDE + 1, 8, f"over {MAX_SIDE}"),
        (20000, 20000, "is too large"),  # Pillow's decompression-bomb limit
    ],
)
def test_an_image_too_large_is_refused_from_its_header(width, height, message):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    with pytest.raises(ValueError, match=message):
        nudenet_preprocess(image_request(zero_png(width, height)))
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 200, f"{grown_mib:.0f} MiB more resident memory: it was decoded"


def test_an_image_at_the_side_limit_is_served():
    out = nudenet_preprocess(image_request(zero_png(MAX_SIDE, 16)))
    assert out["images"].shape == (1, 3, 320, 320)
    assert out["LETTERBOX"].tolist() == [[0, MAX_SIDE - 16, MAX_SIDE, 16]]


def test_a_request_over_its_decoding_budget_is_refused_from_the_headers():
    """Each image is padded to a square of its longer side: three images at the side limit
    would take 3 x 8192² x 3 bytes (600 MB). The request is refused before any is decoded."""
    strip = zero_png(MAX_SIDE, 16)
    request = {"IMAGE": np.array([[strip]] * 3, dtype=object)}
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    with pytest.raises(ValueError, match=r"^IMAGE\[2\] puts the request over its decoding budget"):
        nudenet_preprocess(request)
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 200, f"{grown_mib:.0f} MiB more resident memory: it was decoded"
    assert MAX_BATCH_PIXELS == 2 * MAX_SIDE**2  # the largest image is served alone
    quarter = {"IMAGE": np.array([[zero_png(MAX_SIDE // 4, 16)]] * 32, dtype=object)}
    assert nudenet_preprocess(quarter)["images"].shape == (32, 3, 320, 320)  # 32 x 2048²


def test_a_16_bit_image_is_refused_not_scaled_out_of_range():
    """NudeNet scales by 1/255 for 8-bit pixels; a 16-bit image reached the model at up to 257
    and came back with hundreds of score-1.0 detections."""
    data = cv2.imencode(".png", np.zeros((40, 60, 3), np.uint16))[1].tobytes()
    with pytest.raises(ValueError, match="uint16; send an 8-bit image"):
        nudenet_preprocess(image_request(data))


@pytest.mark.parametrize("value", [np.nan, -1.0, 3e38])
def test_measurements_out_of_range_are_refused(value):
    """3e38 is finite: before the range check the model answered probability NaN."""
    x = np.full((2, 30), 10.0, np.float32)
    x[1, 4] = value
    with pytest.raises(ValueError, match="MEASUREMENTS row 1 column 4"):
        breast_cancer_preprocess({"MEASUREMENTS": x})


@pytest.mark.parametrize("column", range(len(COLUMNS)))
def test_click_features_out_of_range_are_refused_naming_the_column(column):
    """Each column's range ends are served; just past either end, and NaN, are refused."""
    low, high = (np.array([c[i] for c in COLUMNS], np.float32) for i in (1, 2))
    name = COLUMNS[column][0]
    x = np.stack([low, high])
    assert click_preprocess({"FEATURES": x})["features"].shape == (2, len(COLUMNS))
    below, above = np.nextafter(low, np.float32(-np.inf)), np.nextafter(high, np.float32(np.inf))
    for bad in (below[column], above[column], np.nan):
        y = x.copy()
        y[1, column] = bad
        with pytest.raises(ValueError, match=rf"FEATURES row 1 column {column} \({name}\)"):
            click_preprocess({"FEATURES": y})
