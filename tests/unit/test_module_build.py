"""A ``builder`` core's build in ``make pipeline-artifacts`` (``builders.pipeline.module_build``):
the sources read from the module's imports, and when the build is up to date (its stamp's
digest, the files it made, the files the preflight requires)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from builders.pipeline import module_build
from tritonrepo.description import load
from tritonrepo.paths import MODEL_REPOSITORY, PIPELINES, REPO_ROOT


def _write(root: Path, relative: str, text: str = "") -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_the_sources_are_the_module_and_what_it_imports_at_any_depth(tmp_path):
    """Module-level, function-level, relative and ``from package import module`` imports are
    followed, with the packages above each module; third-party and unused modules are not."""
    _write(tmp_path, "builders/__init__.py")
    _write(tmp_path, "builders/onnx_export/__init__.py")
    _write(
        tmp_path,
        "builders/onnx_export/thing.py",
        "import numpy\nfrom . import helper\ndef main():\n    from tritonrepo.image import spec\n",
    )
    _write(tmp_path, "builders/onnx_export/helper.py", "from reference_data.photos import x\n")
    _write(tmp_path, "builders/onnx_export/unused.py")
    _write(tmp_path, "tritonrepo/__init__.py")
    _write(tmp_path, "tritonrepo/image/__init__.py")
    _write(tmp_path, "tritonrepo/image/spec.py")
    _write(tmp_path, "reference_data/__init__.py")
    _write(tmp_path, "reference_data/photos.py", "import tritonrepo.image.spec\n")
    found = module_build.module_sources("builders.onnx_export.thing", tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in found] == [
        "builders/__init__.py",
        "builders/onnx_export/__init__.py",
        "builders/onnx_export/helper.py",
        "builders/onnx_export/thing.py",
        "reference_data/__init__.py",
        "reference_data/photos.py",
        "tritonrepo/__init__.py",
        "tritonrepo/image/__init__.py",
        "tritonrepo/image/spec.py",
    ]
    with pytest.raises(ModuleNotFoundError, match="not a module of this repository"):
        module_build.module_sources("numpy", tmp_path)


def test_a_stamp_decides_whether_the_builder_runs(tmp_path, monkeypatch):
    """image_classification's builder: up to date with the current digest and its outputs
    there; stale when a source changed (another digest) or an output is gone."""
    pipeline = load(PIPELINES / "image_classification" / "pipeline.toml")
    required = module_build.required_files(pipeline, MODEL_REPOSITORY)
    rel = {p.relative_to(REPO_ROOT).as_posix() for p in required}
    assert rel == {
        "model_repository/image_classifier/1/model.onnx",
        "model_repository/image_postprocess/1/labels.txt",
    }
    for path in required:
        if not path.is_file():
            pytest.fail(f"{path} is missing: run `make artifacts` (make test does it)")
    monkeypatch.setattr(module_build, "STAMPS", tmp_path)
    module = pipeline.core.builder
    sources = module_build.module_sources(module)
    assert REPO_ROOT / "builders" / "onnx_export" / "image.py" in sources
    assert REPO_ROOT / "tritonrepo" / "image" / "spec.py" in sources
    digest = module_build.sources_digest(sources)

    def stamp(source_sha256: str, outputs: list[str]) -> None:
        record = {"source_sha256": source_sha256, "outputs": outputs}
        (tmp_path / f"{module}.json").write_text(json.dumps(record))

    stamp(digest, sorted(rel))
    assert module_build.up_to_date(pipeline) == (True, "")
    stamp("0" * 64, sorted(rel))
    assert module_build.up_to_date(pipeline) == (False, "its sources changed")
    stamp(digest, [*sorted(rel), "build/no-such-output.npz"])
    assert module_build.up_to_date(pipeline) == (False, "build/no-such-output.npz is missing")


def test_without_a_stamp_a_builder_whose_own_models_need_no_file_runs(tmp_path, monkeypatch):
    """ctr_session's cpu set requires only its called ctr_model's files (another builder's),
    however new they are: with no stamp its graph builder must run, not be taken as built (a
    fresh clone once served without ctr_session/1/model.onnx)."""
    pipeline = load(PIPELINES / "ctr_session" / "pipeline.toml")
    required = module_build.required_files(pipeline, MODEL_REPOSITORY)
    assert required and all(
        p.relative_to(MODEL_REPOSITORY).parts[0] == "ctr_model" for p in required
    )
    for path in required:
        if not path.is_file():
            pytest.fail(f"{path} is missing: run `make artifacts` (make test does it)")
    monkeypatch.setattr(module_build, "STAMPS", tmp_path)
    old_source = tmp_path / "ctr_session_builder.py"  # older than any built file: Make's rule
    old_source.write_text("")
    os.utime(old_source, ns=(0, 0))
    monkeypatch.setattr(module_build, "module_sources", lambda module: [old_source])
    monkeypatch.setattr(module_build, "sources_digest", lambda paths: "0" * 64)
    assert module_build.up_to_date(pipeline) == (
        False, "no record of a build from its current sources",
    )  # fmt: skip
