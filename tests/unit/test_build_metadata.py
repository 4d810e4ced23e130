"""One writer of the builders' metadata files (``builders.metadata.write_metadata``).

It writes the layout the builders wrote before (``json.dumps(indent=2)`` plus a newline, keys in
the builder's order), adds the common fields (``built_by``, library ``versions``, ``sha256``),
replaces the file atomically (a failed write leaves the old file and no temporary), and what it
writes is what the readers read: ``tritonrepo.server.artifact_checks`` for ``plan_metadata.json``
and ``torch_metadata.json``, ``tritonrepo.runners.torch_runner.check_program_metadata`` for the
latter. Every builder goes through it. No artifacts, no server: everything is in ``tmp_path``.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import json
from pathlib import Path

import numpy
import pytest

from builders import metadata
from tritonrepo.server import artifact_checks

BUILDERS_DIR = Path(metadata.__file__).parent
BUILDER_MODULES = (
    "builders.onnx_export.ctr",
    "builders.onnx_export.image",
    "builders.onnx_export.text_embedding",
    "builders.tensorrt.plans",
    "builders.torch_programs.export",
)
# A record with what the builders write: nesting, floats, None, lists, a non-ASCII label.
RECORD = {
    "model": "ctr_model",
    "version": 2,
    "precision": "int8",
    "heldout_auc": {"fp32": 0.7933, "int8_log_calibration": 0.7931},
    "parity_max_abs_diff": 1.6e-07,
    "min_cosine_vs_fp32": None,
    "photos_top5": {"chelsea": [[285, "Egyptian cat", 0.5123]]},
    "label": "Ünïcödé 🚀",
}


def old_writer_text(record: dict) -> str:
    """What every builder wrote before: ``json.dumps(record, indent=2) + "\\n"``."""
    return json.dumps(record, indent=2) + "\n"


def write(path: Path, fields: dict, artifact: Path, **kw) -> dict:
    return metadata.write_metadata(
        path,
        fields,
        built_by=kw.get("built_by", "builders.onnx_export.ctr"),
        libraries=kw.get("libraries", ("numpy", "no-such-distribution-here")),
        artifacts={artifact.name: artifact},
    )


@pytest.fixture
def artifact(tmp_path: Path) -> Path:
    path = tmp_path / "model.onnx"
    path.write_bytes(b"\x08\x07 not really a graph" * 1000)
    return path


def test_the_builders_own_fields_keep_their_bytes_and_order(tmp_path, artifact):
    path = tmp_path / metadata.BUILD_METADATA_FILE
    written = write(path, RECORD, artifact)
    text = path.read_text()
    common = {k: written[k] for k in metadata.COMMON_FIELDS}
    assert text == old_writer_text(RECORD | common)
    assert text.endswith("}\n") and text.isascii()
    assert list(json.loads(text)) == [*RECORD, *metadata.COMMON_FIELDS]
    assert metadata.render(RECORD) == old_writer_text(RECORD)


def test_common_fields_are_the_module_the_versions_and_the_hashes(tmp_path, artifact):
    path = tmp_path / metadata.BUILD_METADATA_FILE
    written = write(path, RECORD, artifact)
    assert json.loads(path.read_text()) == written
    assert written["built_by"] == "builders.onnx_export.ctr"
    assert written["versions"] == {
        "numpy": numpy.__version__,
        "no-such-distribution-here": None,
    }
    assert written["sha256"] == {"model.onnx": hashlib.sha256(artifact.read_bytes()).hexdigest()}


def test_a_common_field_the_builder_set_is_replaced_in_place(tmp_path, artifact):
    fields = {"model": "m", "sha256": "stale", "version": 1}
    written = write(tmp_path / "m.json", fields, artifact)
    assert list(written) == ["model", "sha256", "version", "built_by", "versions"]
    assert written["sha256"] == {"model.onnx": hashlib.sha256(artifact.read_bytes()).hexdigest()}


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, artifact, monkeypatch):
    path = tmp_path / metadata.BUILD_METADATA_FILE
    write(path, RECORD, artifact)
    before = path.read_bytes()
    with pytest.raises(TypeError):
        write(path, RECORD | {"not_json": object()}, artifact)

    def failing_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(metadata.os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        write(path, RECORD | {"version": 3}, artifact)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name, artifact.name]


def tensorrt_repository(tmp_path: Path, profile_max: int) -> Path:
    """``m``: a TensorRT config with max_batch_size 8, an (empty) plan and its metadata written
    by the writer with the keys ``builders.tensorrt.plans`` sets; the GPU and TensorRT fields
    are this host's, so only the batch range can differ."""
    version_dir = tmp_path / "m" / "1"
    version_dir.mkdir(parents=True)
    (tmp_path / "m" / "config.pbtxt").write_text(
        'name: "m"\nplatform: "tensorrt_plan"\nmax_batch_size: 8\n'
    )
    plan = version_dir / "model.plan"
    plan.write_bytes(b"plan")
    gpu = artifact_checks.gpu_facts()
    fields = {
        "tensorrt_version": artifact_checks.module_version("tensorrt"),
        "gpu_name": gpu[0] if gpu else "NVIDIA H200",
        "compute_capability": gpu[1] if gpu else "9.0",
        "precision": "fp16",
        "profiles": [{"input_ids": {"min": [1, 64], "opt": [4, 64], "max": [profile_max, 64]}}],
    }
    metadata.write_metadata(
        version_dir / "plan_metadata.json",
        fields,
        built_by="builders.tensorrt.plans",
        libraries=("tensorrt",),
        artifacts={"model.plan": plan},
    )
    return tmp_path


def errors(findings: list[artifact_checks.Finding]) -> list[str]:
    return [f.message for f in findings if f.level == "error"]


def test_artifact_checks_read_the_plan_metadata_written(tmp_path):
    fits = tensorrt_repository(tmp_path / "fits", profile_max=8)
    assert errors(artifact_checks.check_model(fits, "m", None)) == []
    short = tensorrt_repository(tmp_path / "short", profile_max=4)
    assert errors(artifact_checks.check_model(short, "m", None)) == [
        "plan profile of 'input_ids' ends at batch 4 < max_batch_size 8"
    ]


def test_artifact_checks_and_the_torch_runner_read_the_program_metadata_written(tmp_path):
    torch = pytest.importorskip("torch")
    from tritonrepo.runners.torch_runner import METADATA_FILE, check_program_metadata

    version_dir = tmp_path / "m" / "1"
    version_dir.mkdir(parents=True)
    (tmp_path / "m" / "config.pbtxt").write_text(
        'name: "m"\nbackend: "torch_python"\nmax_batch_size: 16\n'
    )
    program = version_dir / "model.pt2"
    program.write_bytes(b"program")
    fields = {"model": "m", "max_batch": 16, "torch_version": torch.__version__}
    written = metadata.write_metadata(
        version_dir / METADATA_FILE,
        fields,
        built_by="builders.torch_programs.export",
        libraries=("torch",),
        artifacts={"model.pt2": program},
    )
    assert errors(artifact_checks.check_model(tmp_path, "m", None)) == []
    assert check_program_metadata(program) == written
    metadata.write_metadata(
        version_dir / METADATA_FILE,
        fields | {"max_batch": 4},
        built_by="builders.torch_programs.export",
        libraries=("torch",),
        artifacts={"model.pt2": program},
    )
    assert errors(artifact_checks.check_model(tmp_path, "m", None)) == [
        "the program's batch range ends at 4 < max_batch_size 16: rebuild with `make artifacts-gpu`"
    ]


@pytest.mark.parametrize("name", BUILDER_MODULES)
def test_every_builder_names_itself_and_writes_through_the_one_writer(name):
    module = importlib.import_module(name)
    assert module.BUILT_BY == module.__name__ == name
    assert module.write_metadata is metadata.write_metadata


def test_no_other_builder_module_formats_metadata_json_itself():
    """``json.dumps(..., indent=2)`` is the metadata layout; only builders/metadata.py has it."""
    offenders = []
    for path in sorted(BUILDERS_DIR.rglob("*.py")):
        if path.name == "metadata.py" and path.parent == BUILDERS_DIR:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "dumps"
                and any(
                    k.arg == "indent" and getattr(k.value, "value", 0) == 2 for k in node.keywords
                )
            ):
                offenders.append(f"{path.relative_to(BUILDERS_DIR.parent)}:{node.lineno}")
    assert offenders == []
