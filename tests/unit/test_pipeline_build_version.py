"""Later versions of a described core (``builders.pipeline.build_version``, ``make version``) on
the toy pipeline: written beside the served version with the same parity check and metadata,
the version handed to a ``build`` function that asks for it, the one-step CPU model's version
folder made, nothing served changed, and each refusal with its reason."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from builders.file_digest import sha256
from builders.pipeline import build, build_record, build_version
from tests.unit.pipeline_fixtures.chain.description import CHAIN_PACKAGE, CHAIN_TOML
from tests.unit.pipeline_fixtures.toy import model as toy_model
from tests.unit.pipeline_fixtures.workspace import PACKAGE, Workspace
from tests.unit.test_pipeline_build import toy
from tritonrepo.description import import_ref


def scores(model_file: Path, features: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(model_file), providers=["CPUExecutionProvider"])
    return session.run(None, {"features": features})[0]


def one_step_folder(repo: Path) -> Path:
    """A one-step CPU model of the toy as the generator writes it: its config names the core
    and its file; ``1/model.py`` is the thin model."""
    folder = repo / "toy"
    (folder / "configs").mkdir(parents=True)
    (folder / "1").mkdir()
    (folder / "1" / "model.py").write_text("# the one-step model\n")
    (folder / "configs" / "cpu.pbtxt").write_text(
        'name: "toy"\nbackend: "python"\n'
        'parameters { key: "core_model" value { string_value: "toy_model" } }\n'
        'parameters { key: "core_file" value { string_value: "model.onnx" } }\n'
    )
    return folder


def test_version_2_is_built_beside_version_1_from_a_build_that_takes_the_version(tmp_path):
    pipeline = toy(tmp_path, build=f'"{PACKAGE}.model:build_versioned"')
    repo = tmp_path / "repo"
    build.build(pipeline, repo)
    one_step = one_step_folder(repo)
    first = repo / "toy_model" / "1" / "model.onnx"
    first_digest = sha256(first)
    record = build_version.build_version(pipeline, 2, repo)
    second = repo / "toy_model" / "2" / "model.onnx"
    metadata = json.loads((second.parent / "build_metadata.json").read_text())
    assert metadata == record
    assert metadata["version"] == 2 and metadata["pipeline"] == "toy"
    assert metadata["source"] == f"{PACKAGE}.model:build_versioned(version=2)"
    assert metadata["source_sha256"] == build_record.source_digest(pipeline)
    assert metadata["sha256"]["model.onnx"] == sha256(second)
    assert metadata["parity_rows"] == 8
    assert metadata["parity_max_abs"]["scores"] < build_record.PARITY_ATOL
    # Version 2 is what build(version=2) returned; version 1 is untouched.
    samples = import_ref(pipeline.samples)()
    features = import_ref(pipeline.preprocess.function)(dict(samples))["features"]
    weights = import_ref(f"{PACKAGE}.model:WEIGHTS")
    bias = import_ref(f"{PACKAGE}.model:BIAS")
    np.testing.assert_allclose(scores(second, features), features @ (2 * weights) + bias,
                               rtol=1e-6, atol=1e-6)  # fmt: skip
    assert sha256(first) == first_digest
    # The one-step model can load version 2 (it runs the core file of its own version).
    assert (one_step / "2" / "model.py").read_text() == "# the one-step model\n"


def test_a_build_without_a_version_parameter_gives_what_it_returns_now(tmp_path, capsys):
    pipeline = toy(tmp_path)
    repo = tmp_path / "repo"
    build.build(pipeline, repo)
    record = build_version.build_version(pipeline, 3, repo)
    assert record["source"] == f"{PACKAGE}.model:build()"
    assert sha256(repo / "toy_model" / "3" / "model.onnx") == sha256(
        repo / "toy_model" / "1" / "model.onnx"
    )
    assert not (repo / "toy").exists()  # no one-step model folder: none made


@pytest.mark.parametrize(
    ("model_fields", "version", "reason"),
    [
        ({}, 1, r"version 1 is served \(the configs' versions: \[1\]\); build a new number"),
        ({}, 0, "give a version number of 1 or more"),
        ({"int8": "true"}, 2, r"version 2 is the INT8 version of this core \(int8 = true\)"),
    ],
)
def test_a_version_that_cannot_be_built_is_refused_with_its_reason(
    tmp_path, model_fields, version, reason
):
    pipeline = toy(tmp_path, **model_fields)
    repo = tmp_path / "repo"
    with pytest.raises(build_version.VersionError, match=f"^toy: version {version}: {reason}"):
        build_version.build_version(pipeline, version, repo)
    assert not (repo / "toy_model" / str(version)).exists() or version == 1


def test_a_built_version_is_rebuilt_only_with_force(tmp_path):
    pipeline = toy(tmp_path, build=f'"{PACKAGE}.model:build_versioned"')
    repo = tmp_path / "repo"
    build_version.build_version(pipeline, 2, repo)
    with pytest.raises(build_version.VersionError, match=r"is built already .* --force"):
        build_version.build_version(pipeline, 2, repo)
    assert build_version.build_version(pipeline, 2, repo, force=True)["version"] == 2


def test_a_version_failing_parity_leaves_nothing(tmp_path):
    pipeline = toy(tmp_path, build=f'"{PACKAGE}.model:build_batch_mixing"')
    repo = tmp_path / "repo"
    with pytest.raises(build_record.ParityError):
        build_version.build_version(pipeline, 2, repo)
    assert not (repo / "toy_model" / "2").exists()


def test_a_core_of_a_graph_is_versioned_on_the_feeds_it_gets_in_the_graph(tmp_path, monkeypatch):
    ws = Workspace(tmp_path.resolve(), monkeypatch)
    ws.write_description(CHAIN_TOML.replace("models:first", "models:first_versioned"))
    pipeline = ws.load()
    repo = tmp_path / "repo"
    with pytest.raises(build_version.VersionError, match="name the core to version with --core"):
        build_version.build_version(pipeline, 2, repo)
    build.build(pipeline, repo)
    record = build_version.build_version(pipeline, 2, repo, core_key="first")
    second = repo / "toy_first" / "2" / "model.onnx"
    assert record["core"] == "first" and record["version"] == 2
    assert record["source"] == f"{CHAIN_PACKAGE}.models:first_versioned(version=2)"
    assert record["parity_calls"] >= 1 and record["parity_rows"] > 0
    assert not (repo / "toy_second" / "2").exists()
    features = np.ones((3, 4), np.float32)
    expected = features @ (2 * toy_model.WEIGHTS) + toy_model.BIAS
    np.testing.assert_allclose(scores(second, features), expected, rtol=1e-6)
