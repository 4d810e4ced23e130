"""The ocr pipeline (pipelines/ocr: two models from one description) served over HTTP and gRPC
answers like the package it comes from, ``rapidocr_onnxruntime``'s own ``RapidOCR`` called in
this process on the same images (without the angle classifier: ``use_cls=False``): the same
lines in the same order, the same text, boxes within 0.01 px, scores within 1e-4 (the
pipeline's JSON keeps 2 and 4 decimals).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from pipelines.ocr.samples import render, samples
from tests.conftest import server_options
from tritonrepo.server.launcher import TritonServer
from tritonrepo_client import PipelineClient

pytestmark = pytest.mark.server

# Images of other sizes than the samples' (each its own request): two lines, and no text.
EXTRA = (
    render(("Parity 2026", "two models")),
    render(("Parity 2026", "two models"), (240, 120)),
    render((), (96, 96)),
)


@pytest.fixture(scope="module")
def images() -> list[bytes]:
    return [row[0] for row in samples()["IMAGE"]] + list(EXTRA)


@pytest.fixture(scope="module")
def reference(images: list[bytes]) -> list[list]:
    """RapidOCR's answer per image: ``[[box 4x2, text, score], ...]`` ([] for none)."""
    from rapidocr_onnxruntime import RapidOCR

    engine = RapidOCR()
    return [engine(image, use_cls=False)[0] or [] for image in images]


@pytest.fixture(scope="module")
def server():
    with TritonServer(server_options("pipeline-ocr-parity", models=("ocr",))) as server:
        yield server


def assert_like_library(text: bytes, lines: bytes, want: list, where: str) -> None:
    got = json.loads(lines)
    assert [g["text"] for g in got] == [w[1] for w in want], where
    assert text.decode() == "\n".join(w[1] for w in want), where
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g["box"], w[0], atol=0.01, err_msg=where)
        assert abs(g["score"] - w[2]) <= 1e-4, (where, g, w)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_served_ocr_answers_like_rapidocr(server, images, reference, protocol):
    assert any(reference), "the reference read no text at all: the images are wrong"
    url = server.options.grpc_url if protocol == "grpc" else server.options.http_url
    with PipelineClient("ocr", url, protocol) as client:
        batch = np.asarray([[image] for image in images[:4]], dtype=object)
        got = client.infer({"IMAGE": batch})  # 4 images of one size in one request
        for i in range(4):
            assert_like_library(
                got["TEXT"][i, 0],
                got["LINES"][i, 0],
                reference[i],
                f"{protocol}, image {i} of a batch of 4",
            )
        for i in range(4, len(images)):
            one = client.infer({"IMAGE": np.asarray([[images[i]]], dtype=object)})
            assert_like_library(
                one["TEXT"][0, 0], one["LINES"][0, 0], reference[i], f"{protocol}, image {i} alone"
            )


def test_images_of_two_sizes_in_one_request_get_a_clear_error(server, images):
    with PipelineClient("ocr", server.options.http_url) as client:
        mixed = np.asarray([[images[0]], [EXTRA[1]]], dtype=object)
        with pytest.raises(Exception, match="same size"):
            client.infer({"IMAGE": mixed})
        alone = client.infer({"IMAGE": np.asarray([[images[0]]], dtype=object)})
    assert alone["TEXT"][0, 0], "served nothing after the refused request"


def png_header(width: int, height: int) -> bytes:
    """A PNG whose IHDR claims ``width`` x ``height`` (8-bit RGB), with a few bytes of data."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        return struct.pack(">I", len(data)) + kind + data + crc

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    body = chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(bytes(10))) + chunk(b"IEND", b"")
    return b"\x89PNG\r\n\x1a\n" + body


def test_an_image_over_pillows_pixel_limit_gets_a_clear_error(server, images):
    """Pillow refuses to decode over 2 x Image.MAX_IMAGE_PIXELS (DecompressionBombError): the
    request gets the same clear error as any unreadable image, not an internal error."""
    with PipelineClient("ocr", server.options.http_url) as client:
        bomb = np.asarray([[png_header(100_000, 100_000)]], dtype=object)
        with pytest.raises(Exception, match="IMAGE row 0: not an image Pillow can read"):
            client.infer({"IMAGE": bomb})
        alone = client.infer({"IMAGE": np.asarray([[images[0]]], dtype=object)})
    assert alone["TEXT"][0, 0], "served nothing after the refused request"
