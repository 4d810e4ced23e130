"""A core output whose first dim the graph declares fixed while the model returns one row per
input row (onnxmltools' ``convert_lightgbm(..., zipmap=False)`` declares ``label`` ``[1]``
whatever the batch): the generator accepts the description and says so in one line, and the
build writes a ``model.onnx`` whose dim is the dynamic batch dim
(:mod:`builders.pipeline.batch_dims`). A graph that declares another shape than it computes in
any other way is still refused (``test_pipeline_description``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from builders.pipeline import batch_dims, build
from builders.pipeline.graph import graph_io
from tests.unit.pipeline_fixtures.toy.model import build as toy_build
from tests.unit.pipeline_fixtures.toy.model import build_fixed_batch
from tests.unit.pipeline_fixtures.workspace import PACKAGE, TOY_TOML, Workspace, edited

BUILD = f'build = "{PACKAGE}.model:build"'
FIXED_TOML = edited(TOY_TOML, BUILD, BUILD.replace(":build", ":build_fixed_batch"))
NOTE = (
    "toy: model: outputs 'scores' (declared [1, 2]), 'label' (declared [1]) have one row per "
    "sample (8 rows for a batch of 8): their first dim is now the dynamic batch dim"
)


def features(rows: int) -> dict[str, np.ndarray]:
    """The toy graph's feeds: ``features`` FP32 ``[rows, 4]``."""
    return {"features": np.arange(rows * 4, dtype=np.float32).reshape(rows, 4) / 10}


def first_dims(model: onnx.ModelProto) -> dict[str, tuple[int, str]]:
    """``{output: (dim_value, dim_param) of its first dim}``."""
    return {
        v.name: (
            v.type.tensor_type.shape.dim[0].dim_value,
            v.type.tensor_type.shape.dim[0].dim_param,
        )
        for v in model.graph.output
    }


def test_outputs_declared_like_onnxmltools_get_the_dynamic_batch_dim():
    model = build_fixed_batch()
    assert first_dims(model) == {"scores": (1, ""), "label": (1, "")}
    assert batch_dims.free_on_feeds(model, features(16)) == {"scores": (1, 2), "label": (1,)}
    # Unnamed, as the input's batch dim (onnxmltools writes None): dynamic, no other change.
    assert first_dims(model) == {"scores": (0, ""), "label": (0, "")}
    assert [t.shape for t in graph_io(model).outputs] == [(None, 2), (None,)]
    onnx.checker.check_model(model)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    scores, label = session.run(["scores", "label"], features(3))
    assert scores.shape == (3, 2) and label.shape == (3,)
    assert batch_dims.free_on_feeds(model, features(16)) == {}  # nothing left to free


def test_a_named_batch_dim_of_the_inputs_is_the_one_given():
    model = toy_build()  # features ["batch", 4] -> scores ["batch", 2]
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_value = 1
    assert batch_dims.free_on_feeds(model, features(8)) == {"scores": (1, 2)}
    assert first_dims(model) == {"scores": (0, "batch")}


@pytest.mark.parametrize(
    ("results", "rows", "freed"),
    [
        ([np.zeros((16, 2)), np.zeros(16)], 16, {"scores": (1, 2), "label": (1,)}),
        ([np.zeros((1, 2)), np.zeros(16)], 16, {"label": (1,)}),  # one row whatever the batch
        ([np.zeros((16, 3)), np.zeros((16, 1))], 16, {}),  # another dim, another rank
        ([np.zeros((1, 2)), np.zeros(1)], 1, {}),  # a batch of 1 proves nothing
        ([np.zeros((16, 2)), np.zeros(16)], None, {}),  # inputs of different batches
    ],
)
def test_only_what_the_samples_prove_is_the_batch_is_freed(results, rows, freed):
    model = build_fixed_batch()
    assert batch_dims.fixed_batch_outputs(model, ["scores", "label"], results, rows) == freed
    assert first_dims(model) == {"scores": (1, ""), "label": (1, "")}  # nothing changed


def test_batch_rows_is_the_first_dim_every_feed_shares():
    assert batch_dims.batch_rows({"a": np.zeros((8, 3)), "b": np.zeros(8)}) == 8
    assert batch_dims.batch_rows({"a": np.zeros((8, 3)), "b": np.zeros(7)}) is None
    assert batch_dims.batch_rows({"a": np.float32(1)}) is None
    assert batch_dims.batch_rows({}) is None


def test_the_generator_accepts_it_and_says_so_in_one_line(tmp_path, monkeypatch):
    ws = Workspace(tmp_path, monkeypatch)
    ws.write_description(FIXED_TOML)
    result = ws.run()
    assert result.rc == 0, result.err
    assert result.err == ""
    assert [line for line in result.out.splitlines() if "dynamic batch dim" in line] == [NOTE]
    config = text_format.Parse(
        (ws.repository / "toy_model" / "config.pbtxt").read_text(), mc.ModelConfig()
    )
    outputs = {o.name: (list(o.dims), list(o.reshape.shape)) for o in config.output}
    assert outputs == {"scores": ([2], []), "label": ([1], [])}  # as for a graph declaring [N]


def test_the_build_writes_the_dynamic_dim_and_records_it(tmp_path, capsys):
    ws_root = tmp_path / "pipelines" / "toy"
    ws_root.mkdir(parents=True)
    (ws_root / "pipeline.toml").write_text(FIXED_TOML)
    from tritonrepo.description import load

    repo = tmp_path / "repo"
    record = build.build(load(ws_root / "pipeline.toml"), repo)
    assert capsys.readouterr().out.splitlines() == [NOTE]
    folder: Path = repo / "toy_model" / "1"
    built = onnx.load(str(folder / "model.onnx"))
    assert [t.shape for t in graph_io(built).outputs] == [(None, 2), (None,)]
    metadata = json.loads((folder / "build_metadata.json").read_text())
    assert metadata == record
    assert metadata["batch_dim_made_dynamic"] == {"scores": [1, 2], "label": [1]}
    assert metadata["parity_max_abs"] == {"scores": 0.0, "label": 0.0}
