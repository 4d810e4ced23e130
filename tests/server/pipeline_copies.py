"""A described pipeline's generated models copied into a test's own repository, and a later
version of its core built there by the tools (``python -m builders.pipeline.build NAME
--version N``, what ``make version`` runs): for the tests that roll versions out on a real
server without touching the checkout's repository."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tritonrepo.paths import MODEL_REPOSITORY, PIPELINES, REPO_ROOT

BUILD_TIMEOUT_S = 300


def copy_pipeline(pattern: str, root: Path) -> Path:
    """``root/model_repository`` holding a copy of every model folder matching ``pattern``
    (e.g. ``breast_cancer*``), first versions only, and ``root/pipelines`` linked to the
    checkout's (the Python models' code root, ``../..`` from their folders)."""
    repo = root / "model_repository"
    for folder in MODEL_REPOSITORY.glob(pattern):
        shutil.copytree(folder, repo / folder.name,
                        ignore=shutil.ignore_patterns("__pycache__", "[2-9]"))  # fmt: skip
    (root / "pipelines").symlink_to(PIPELINES)
    return repo


def build_version(
    pipeline: str, version: int, repo: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    """The build command's run for ``version`` of ``pipeline``'s core into ``repo`` (``extra``:
    more of its arguments); its exit status and output are the caller's to check."""
    return subprocess.run(
        [sys.executable, "-m", "builders.pipeline.build", pipeline, "--version", str(version),
         "--repository", str(repo), *extra],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S,
    )  # fmt: skip
