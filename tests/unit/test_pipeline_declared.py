"""Two fields of the description written into the configs as declared, on the toy pipeline of
``tests/unit/pipeline_fixtures`` in a temporary checkout: ``ragged_inputs`` (a config set's
``allow_ragged_batch`` inputs) and the ``[probe]`` table (the ensemble's ``tritonrepo_probe``,
in place of the one made from the samples); each refused, naming its field, when it names a
tensor the model does not have.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2 as mc

from tests.unit.pipeline_fixtures.workspace import Workspace
from tritonrepo.description import DescriptionError
from tritonrepo_client.control.probe_declaration import declared_probe

PROBE = """
[probe]
inputs = [
  { name = "X", datatype = "FP32", shape = [1, 4], data = [9.0, 8.0, 7.0, 6.0] },
  { name = "TAG", datatype = "BYTES", shape = [1, 1], data = ["declared"] },
]
outputs = [{ name = "SCORES", datatype = "FP32", shape = [1, 2] }]
"""


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    return Workspace(tmp_path.resolve(), monkeypatch)


def parse(path: Path) -> mc.ModelConfig:
    return text_format.Parse(path.read_text(), mc.ModelConfig())


def ragged(config: mc.ModelConfig) -> dict[str, bool]:
    return {t.name: t.allow_ragged_batch for t in config.input}


def append(ws: Workspace, text: str) -> None:
    ws.write_description(ws.description.read_text() + text)


# --- ragged_inputs ----------------------------------------------------------------------------
def test_ragged_inputs_mark_that_sets_inputs_only(ws: Workspace):
    append(ws, '\n[model.cpu]\nragged_inputs = ["features"]\n')
    result = ws.run()
    assert result.rc == 0, result.err
    core = ws.repository / "toy_model"
    assert ragged(parse(core / "configs/cpu.pbtxt")) == {"features": True}
    assert ragged(parse(core / "config.pbtxt")) == {"features": False}
    # a build core's torch_gpu set is the cpu set's ONNX Runtime stand-in, ragged inputs too
    assert ragged(parse(core / "configs/torch_gpu.pbtxt")) == {"features": True}


def test_ragged_inputs_of_a_step(ws: Workspace):
    old = 'outputs = [{ name = "TAG_LENGTH"'
    ws.edit_description(old, f'ragged_inputs = ["X"]\n{old}')
    result = ws.run()
    assert result.rc == 0, result.err
    assert ragged(parse(ws.repository / "toy_preprocess/config.pbtxt")) == {
        "X": True,
        "TAG": False,
    }
    assert ragged(parse(ws.repository / "toy_model/config.pbtxt")) == {"features": False}


def test_ragged_inputs_naming_no_input_is_refused(ws: Workspace):
    append(ws, '\n[model.cpu]\nragged_inputs = ["X"]\n')  # X is the request's, not the core's
    result = ws.run()
    assert result.rc == 1
    assert "model.cpu.ragged_inputs: 'X' is not an input of this model" in result.err
    assert "its inputs: features" in result.err
    assert not (ws.repository / "toy_model").exists()


def test_ragged_inputs_must_be_names(ws: Workspace):
    append(ws, "\n[model.cpu]\nragged_inputs = [1]\n")
    with pytest.raises(DescriptionError, match=r"model\.cpu\.ragged_inputs: \[1\]"):
        ws.load()


# --- [probe] ----------------------------------------------------------------------------------
def test_declared_probe_becomes_the_ensembles_parameter(ws: Workspace):
    append(ws, PROBE)
    result = ws.run()
    assert result.rc == 0, result.err
    config = parse(ws.repository / "toy/config.pbtxt")
    text = config.parameters["tritonrepo_probe"].string_value
    assert json.loads(text) == ws.load().probe  # the table, not the smallest sample row
    as_json = json_format.MessageToDict(config, preserving_proto_field_name=True)
    probe = declared_probe(as_json, "toy")
    assert probe is not None
    np.testing.assert_array_equal(probe.inputs["X"], np.array([[9, 8, 7, 6]], dtype=np.float32))
    assert probe.inputs["TAG"].tolist() == [[b"declared"]]
    assert [(o.name, o.shape) for o in probe.outputs] == [("SCORES", (1, 2))]


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('{ name = "X", datatype', '{ name = "Y", datatype', "probe.inputs: 'Y' is not a request"),
        ('datatype = "FP32", shape = [1, 4]', 'datatype = "INT32", shape = [1, 4]',
         "probe.inputs: 'X' is FP32, not INT32"),
        ("shape = [1, 4], data = [9.0, 8.0, 7.0, 6.0]", "shape = [1, 2], data = [9.0, 8.0]",
         "probe.inputs: 'X' has shape [1, 2]; give [rows, 4]"),
        ('outputs = [{ name = "SCORES"', 'outputs = [{ name = "LOGITS"',
         "probe.outputs: 'LOGITS' is not a response tensor"),
        ("data = [9.0, 8.0, 7.0, 6.0]", "data = [9.0, 8.0, 7.0]",
         "probe: parameter tritonrepo_probe"),
    ],
)  # fmt: skip
def test_a_declared_probe_that_does_not_fit_is_refused(
    ws: Workspace, old: str, new: str, message: str
):
    append(ws, PROBE.replace(old, new))
    assert ws.description.read_text().count(new) == 1
    result = ws.run()
    assert result.rc == 1
    assert message in result.err
    assert not (ws.repository / "toy").exists()
