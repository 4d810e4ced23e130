"""Reading a description file: :func:`load` (a ``pipeline.toml``, single-core or graph: the one
place that tells the two shapes apart, by their tables), :func:`import_ref` (what a
``module:attribute`` reference names) and :func:`discover` (the descriptions under a folder).
The tables are read by :mod:`tritonrepo.description.parse`."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tritonrepo.description.parse.graph import is_graph, parse_graph
from tritonrepo.description.parse.single_core import parse
from tritonrepo.description.schema import (
    DESCRIPTION_FILE,
    DescriptionError,
    GraphPipeline,
    Pipeline,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


def load(path: Path | str) -> Pipeline | GraphPipeline:
    """Read and check ``path`` (a ``pipeline.toml``).

    Raises:
        DescriptionError: the file is missing, is not TOML, or has structural problems.
    """
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DescriptionError(
            path, ["no such file; write pipelines/<name>/pipeline.toml"]
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise DescriptionError(path, [f"not valid TOML: {exc}"]) from None
    if is_graph(data):  # [models.<key>] and [[step]]: several core models
        return parse_graph(data, path.resolve())
    return parse(data, path.resolve())


def import_ref(ref: str) -> Callable[..., Any]:
    """The object ``ref`` (``package.module:attribute``) names.

    Raises:
        ImportError: the module cannot be imported (its own error included) or has no such
            attribute.
    """
    module_name, _, attribute = ref.partition(":")
    module = importlib.import_module(module_name)
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ImportError(f"module '{module_name}' has no attribute '{attribute}'") from None


def discover(root: Path) -> list[Path]:
    """The descriptions under ``root`` (``root/<name>/pipeline.toml``), sorted by name."""
    return sorted(root.glob(f"*/{DESCRIPTION_FILE}")) if root.is_dir() else []
