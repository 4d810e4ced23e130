"""Content hashes of built files, for the builders' metadata."""

from __future__ import annotations

import hashlib
from pathlib import Path


def sha256(path: str | Path) -> str:
    """Hex SHA-256 of a file, read in 1 MiB blocks (artifacts reach ~90 MB)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
