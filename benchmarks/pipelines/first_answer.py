"""``make bench-pipelines``, point 2: the steps from description to first served answer.

The timed ``python`` subprocesses (``generate --check``, ``build``), copying the generated model
folders into a fresh repository, and the test suite's server options for that repository.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from tritonrepo.description import Pipeline
from tritonrepo.paths import MODEL_REPOSITORY, REPO_ROOT

ARTIFACT_FILES = ("model.onnx", "build_metadata.json", "__pycache__")  # not copied: built there


def timed_command(args: Sequence[str], log: Path) -> float:
    """Run ``python ARGS`` in the checkout; its output goes to ``log``; seconds taken.

    Raises:
        SystemExit: the command failed (its output is in ``log``).
    """
    started = time.perf_counter()
    done = subprocess.run([sys.executable, *args], cwd=REPO_ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    log.write_text(f"$ python {' '.join(args)}\n{done.stdout}{done.stderr}")
    if done.returncode != 0:
        raise SystemExit(f"`python {' '.join(args)}` exited {done.returncode}: see {log}")
    return seconds


def models_of(pipeline: Pipeline) -> list[str]:
    """The ensemble and its three steps, as named in the model repository."""
    return [
        pipeline.name,
        pipeline.preprocess.model,
        pipeline.core.model,
        pipeline.postprocess.model,
    ]


def copy_generated(pipeline: Pipeline, repository: Path) -> None:
    """Copy the pipeline's generated model folders from the checkout's repository into
    ``repository``, without built artifacts (``model.onnx``, ``build_metadata.json``)."""
    for model in models_of(pipeline):
        shutil.copytree(
            MODEL_REPOSITORY / model,
            repository / model,
            ignore=shutil.ignore_patterns(*ARTIFACT_FILES),
        )


def server_options(log_file: Path, repository: Path, models: Sequence[str]):
    """The test suite's server options (free ports, random repository key, CPU configs) for
    ``repository``, serving only ``models``."""
    from tests.conftest import server_options as test_options

    return test_options(
        log_file.stem, log_file=log_file, model_repository=repository, models=tuple(models)
    )
