"""The built ImageNet labels file (`make artifacts`) matches the class table the postprocess
step uses."""

from __future__ import annotations

import io

from PIL import Image

from tritonrepo.image import spec
from tritonrepo.image.labels import imagenet_labels, read_labels
from tritonrepo.paths import MODEL_REPOSITORY


def _file(image: Image.Image, fmt: str = "PNG", **options) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def test_labels_are_imagenet_and_the_built_file_matches():
    labels = imagenet_labels()
    assert len(labels) == 1000 and labels[0] == "tench" and labels[281] == "tabby"
    assert labels[504] == "coffee mug" and labels[812] == "space shuttle"
    built = MODEL_REPOSITORY / spec.POSTPROCESS_MODEL / "1" / spec.LABELS_FILE
    assert read_labels(built) == labels
