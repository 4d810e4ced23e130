"""The builder entry of ``make artifacts`` (``builders.pipeline.build``) on the toy pipeline:
the model and its metadata, the batch-parity check, the INT8 version and its end-to-end
agreement, and the up-to-date skip."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from builders.file_digest import sha256
from builders.pipeline import build, build_record
from tests.unit.pipeline_fixtures.workspace import PACKAGE, TOY_TOML
from tritonrepo.description import import_ref, load


def toy(tmp_path: Path, **model_fields: str) -> object:
    """The toy description in ``tmp_path``, with ``[model]`` fields replaced or added."""
    text = TOY_TOML
    for key, value in model_fields.items():
        if key == "build":
            text = text.replace(f'build = "{PACKAGE}.model:build"', f"build = {value}")
        else:
            text = text.replace("[model]\n", f"[model]\n{key} = {value}\n")
    path = tmp_path / "pipelines" / "toy" / "pipeline.toml"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    return load(path)


def test_build_writes_the_model_and_its_metadata_then_skips_when_unchanged(tmp_path):
    pipeline = toy(tmp_path)
    repo = tmp_path / "repo"
    record = build.build(pipeline, repo)
    model_file = repo / "toy_model" / "1" / "model.onnx"
    metadata = json.loads((repo / "toy_model" / "1" / "build_metadata.json").read_text())
    assert metadata == record
    assert metadata["pipeline"] == "toy" and metadata["parity_rows"] == 8
    assert metadata["parity_max_abs"]["scores"] < build_record.PARITY_ATOL
    assert metadata["source_sha256"] == build_record.source_digest(pipeline)
    assert metadata["sha256"]["model.onnx"] == sha256(model_file)
    # The built graph computes what the toy says (scores = features @ W + b).
    samples = import_ref(pipeline.samples)()
    features = import_ref(pipeline.preprocess.function)(dict(samples))["features"]
    session = ort.InferenceSession(str(model_file), providers=["CPUExecutionProvider"])
    weights = import_ref(f"{PACKAGE}.model:WEIGHTS")
    bias = import_ref(f"{PACKAGE}.model:BIAS")
    got = session.run(None, {"features": features})[0]
    np.testing.assert_allclose(got, features @ weights + bias, rtol=1e-6, atol=1e-6)
    assert not (repo / "toy_model" / "2").exists()  # no INT8 unless asked
    mtime = model_file.stat().st_mtime_ns
    assert build.build(pipeline, repo) is None  # up to date: nothing rebuilt
    assert model_file.stat().st_mtime_ns == mtime
    pipeline.source.write_text(pipeline.source.read_text() + "\n# changed\n")
    assert build.build(load(pipeline.source), repo) is not None  # the digest moved


def test_a_graph_whose_rows_depend_on_each_other_fails_parity_and_leaves_nothing(tmp_path):
    pipeline = toy(tmp_path, build=f'"{PACKAGE}.model:build_batch_mixing"')
    repo = tmp_path / "repo"
    with pytest.raises(build_record.ParityError, match="between batch 8 and batch 1"):
        build.build(pipeline, repo)
    assert sorted(p.name for p in (repo / "toy_model" / "1").iterdir()) == []


def test_int8_builds_version_2_and_records_its_end_to_end_agreement(tmp_path):
    pipeline = toy(tmp_path, int8="true")
    repo = tmp_path / "repo"
    build.build(pipeline, repo)
    int8 = json.loads((repo / "toy_model" / "2" / "build_metadata.json").read_text())
    assert int8["quantization"].startswith("ONNX Runtime static QDQ INT8")
    assert 0 < int8["max_abs_vs_fp32"] < 0.5, int8["max_abs_vs_fp32"]  # scores of size ~5
    agreeing, rows = (int(n) for n in int8["rows_agreeing_end_to_end"].split("/"))
    assert rows == 8 and 0 <= agreeing <= rows
    graph = (repo / "toy_model" / "2" / "model.onnx").read_bytes()
    assert b"QuantizeLinear" in graph  # really quantized


def test_a_pipeline_builds_after_the_pipelines_whose_models_it_calls():
    """ctr_session's core graph is made from ctr_ranking's ctr_model, so it builds after it in
    any order the descriptions are found in; calls in a circle are refused, naming them."""
    from dataclasses import replace

    from builders.pipeline.build import PIPELINES, build_order
    from tritonrepo.description import DescriptionError, discover, load

    described = [load(path) for path in discover(PIPELINES)]
    for given in (described, described[::-1]):
        names = [p.name for p in build_order(given)]
        assert sorted(names) == sorted(p.name for p in described)
        assert names.index("ctr_ranking") < names.index("ctr_session")
    by_name = {p.name: p for p in described}
    ranking = by_name["ctr_ranking"]
    circle = replace(ranking, preprocess=replace(ranking.preprocess, calls=("ctr_session",)))
    with pytest.raises(DescriptionError, match="a cycle among ctr_ranking, ctr_session"):
        build_order([circle, by_name["ctr_session"]])
