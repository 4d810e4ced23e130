"""The one writer of the builders' metadata files, next to the artifact they describe.

Files written through :func:`write_metadata`:

* ``build_metadata.json``: ONNX exports (``builders.onnx_export.text_embedding``, ``.ctr``,
  ``.image``), one per version folder;
* ``plan_metadata.json``: TensorRT plans (``builders.tensorrt.plans``), read by
  ``tritonrepo.server.artifact_checks`` (``profiles``, ``compute_capability``,
  ``tensorrt_version``);
* ``torch_metadata.json``: ``torch.export`` programs (``builders.torch_programs.export``), read by
  ``tritonrepo.runners.torch_runner.check_program_metadata`` and ``artifact_checks``
  (``max_batch``, ``torch_version``).

Each builder keeps its own fields, in the order it sets them. Fields common to every file, set by
:func:`write_metadata` after the builder's own:

* ``built_by``: the builder's module, e.g. ``"builders.onnx_export.ctr"``;
* ``versions``: ``{distribution: version}`` of the libraries the builder used, from the installed
  distributions (``importlib.metadata``; ``None`` for one that is not installed, e.g.
  ``tensorrt`` on a host that builds with a stand-in backend);
* ``sha256``: ``{file name: hex SHA-256}`` of the artifacts the metadata describes (e.g.
  ``{"model.onnx": "3f1c..."}``), hashed by ``builders.file_digest.sha256``.

Layout (:func:`render`): ``json.dumps`` with ``indent=2``, ASCII only (``ensure_ascii``), keys in
insertion order (the builders set them in a fixed order, so a rebuild with the same figures
writes the same bytes), one trailing newline. The file is written to a temporary name in the same
folder, flushed to disk and renamed over the old one (``os.replace``), so a reader sees either
the old file or the new one, never a partial one.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from importlib import metadata as distributions
from pathlib import Path
from typing import Any

from builders.file_digest import sha256

BUILD_METADATA_FILE = "build_metadata.json"  # ONNX exports; plan/torch files name their own
COMMON_FIELDS = ("built_by", "versions", "sha256")


def library_versions(libraries: Iterable[str]) -> dict[str, str | None]:
    """``{distribution: installed version}`` in the given order, ``None`` when not installed.

    Args:
        libraries: distribution names as pip knows them, e.g. ``("torch", "onnxruntime")``.
    """
    versions: dict[str, str | None] = {}
    for name in libraries:
        try:
            versions[name] = distributions.version(name)
        except distributions.PackageNotFoundError:
            versions[name] = None
    return versions


def render(record: Mapping[str, Any]) -> str:
    """The file's text: ``json.dumps(record, indent=2)`` plus one newline (see the module
    docstring).

    Raises:
        TypeError: a value JSON cannot encode.
    """
    return json.dumps(record, indent=2) + "\n"


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename.

    Raises:
        OSError: the folder is missing or not writable (nothing is left behind).
    """
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(temporary, 0o644)  # mkstemp creates 0600; the server may run as another user
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_metadata(
    path: Path,
    fields: Mapping[str, Any],
    *,
    built_by: str,
    libraries: Iterable[str],
    artifacts: Mapping[str, Path],
) -> dict[str, Any]:
    """Write ``fields`` plus the common fields to ``path`` (see the module docstring).

    Args:
        path: the metadata file, e.g. ``<repository>/ctr_model/1/build_metadata.json``; its
            folder must exist.
        fields: the builder's own fields (JSON-encodable), written first and in their order.
            A common field already in ``fields`` is replaced in its place.
        built_by: the builder's module name, e.g. ``"builders.onnx_export.ctr"``.
        libraries: distribution names for ``versions``.
        artifacts: ``{name recorded: file to hash}`` for ``sha256``; the file may still be under
            a temporary name (e.g. ``{"model.plan": <plan>.tmp}``) when it is renamed after.

    Returns:
        The record written (what ``json.loads`` of the file gives back).

    Raises:
        TypeError: a field JSON cannot encode (the old file is left as it was).
        OSError: an artifact cannot be read or the file cannot be written.
    """
    record = dict(fields)
    record["built_by"] = built_by
    record["versions"] = library_versions(libraries)
    record["sha256"] = {name: sha256(file) for name, file in artifacts.items()}
    write_atomic(path, render(record))
    return record
