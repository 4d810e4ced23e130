"""A core model's torch program exported on the CPU in FP32 once for a test run, not once per
test file: :func:`cpu_program` runs ``builders.torch_programs.export.build`` the first time and
keeps what it wrote in ``build/test-cache/torch-programs/``, under a key of everything the
export reads; later calls (another file, another pytest-xdist worker, a later run on the same
checkout) copy those files. The text encoder's export is the slow one, and both
``tests/artifacts/test_torch_export.py`` and ``tests/server/test_one_step_gpu_model.py`` (through
``tests/one_step_on_cpu.py``) need it.

The key: the model, its ``max_batch_size`` in the target repository's ``torch_gpu`` config,
PyTorch's version, the source of ``builders.torch_programs.export`` and every first-party module
it imports (``builders.pipeline.module_build.module_sources``), and the source weights given.
A change to any of them makes a new export. Workers wait for each other on a lock file, so one
export is made even when two files ask for it at once.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
from collections.abc import Sequence
from pathlib import Path

from builders.pipeline.module_build import module_sources, sources_digest
from builders.torch_programs import export as torch_export
from tritonrepo.paths import BUILD_DIR
from tritonrepo.runners.torch_runner import METADATA_FILE
from tritonrepo.text import spec as text_spec

CACHE = BUILD_DIR / "test-cache" / "torch-programs"
FILES = ("model.pt2", METADATA_FILE)


def text_encoder_sources() -> list[Path]:
    """The files of sentence-transformers' model the text encoder is exported from (weights,
    config, tokenizer)."""
    return sorted(p for p in Path(text_spec.source_model_dir()).rglob("*") if p.is_file())


def export_key(model: str, repository: Path, weights: Sequence[Path]) -> str:
    """SHA-256 (16 hex digits) of what the CPU FP32 export of ``model`` into ``repository``
    reads (module docstring)."""
    import torch

    digest = hashlib.sha256()
    parts = [model, str(torch_export.max_batch(repository, model)), torch.__version__,
             sources_digest(module_sources(torch_export.__name__))]  # fmt: skip
    digest.update("\0".join(parts).encode())
    for path in weights:
        with path.open("rb") as f:
            digest.update(hashlib.file_digest(f, "sha256").digest())
    return digest.hexdigest()[:16]


def cpu_program(model: str, repository: Path, weights: Sequence[Path]) -> dict:
    """``torch_export.build(model, repository, "cpu", "fp32")``, or its files copied from the
    cache when an export of the same inputs was kept; the metadata written either way.

    Args:
        model: the core model (one of ``torch_export.MODELS``).
        repository: the model repository to write ``<model>/1/model.pt2`` and its metadata
            into (its ``configs/torch_gpu.pbtxt`` gives the largest batch).
        weights: the source weights the export reads (part of the key).
    """
    kept = CACHE / f"{model}-{export_key(model, repository, weights)}"
    target = repository / model / "1"
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / f"{model}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker exporting the same model: wait
        if not all((kept / name).is_file() for name in FILES):
            metadata = torch_export.build(model, repository, "cpu", "fp32")
            staging = kept.with_name(kept.name + ".partial")
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir()
            for name in FILES:
                shutil.copy2(target / name, staging / name)
            shutil.rmtree(kept, ignore_errors=True)  # an incomplete copy of an earlier run
            staging.replace(kept)
            return metadata
    target.mkdir(parents=True, exist_ok=True)
    for name in FILES:
        shutil.copy2(kept / name, target / name)
    return json.loads((target / METADATA_FILE).read_text())
