"""Where things live in a checkout of this repository."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
MODEL_REPOSITORY = REPO_ROOT / "model_repository"
BACKENDS_SOURCE = REPO_ROOT / "backends"
BUILD_DIR = REPO_ROOT / "build"
PIPELINES = REPO_ROOT / "pipelines"  # pipeline descriptions and their code (tritonrepo.pipelines)
