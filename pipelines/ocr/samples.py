"""Sample requests for the ocr pipeline: short lines of text drawn with Pillow's own font."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image, ImageDraw, ImageFont

LINES = (
    ("TRITON 2.51", "ensemble"),
    ("HELLO", "world 42"),
    ("detect", "recognise"),
    ("ONNX", "Runtime"),
    ("batch 8", "rows"),
    ("model", "repository"),
    ("PP-OCRv4", "mobile"),
    ("text 2026", "lines"),
)
SIZE = (192, 160)  # width, height in px: one size, so that the samples batch together


def render(lines: tuple[str, ...], size: tuple[int, int] = SIZE) -> bytes:
    """A PNG of ``lines`` in black on white, Pillow's default font at 22 px, 50 px apart."""
    image = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=22)
    for i, line in enumerate(lines):
        draw.text((10, 20 + 50 * i), line, fill="black", font=font)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def samples() -> dict[str, np.ndarray]:
    """``IMAGE`` BYTES ``[8, 1]``: one PNG per entry of :data:`LINES`."""
    return {"IMAGE": np.asarray([[render(lines)] for lines in LINES], dtype=object)}
