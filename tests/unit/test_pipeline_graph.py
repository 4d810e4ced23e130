"""Graph descriptions (``[models.<key>]`` and ``[[step]]``: several core models, Python steps
between them, a step calling a model): reading, the generator's wiring checks, the files it
writes (the ensemble chains as described and passes check_ensemble; a step's calls become
``tritonrepo_calls``, which the launcher follows), and the chain in one process against numpy.
"""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2 as mc

from builders.pipeline.graph import obtain_model
from builders.pipeline.graph_in_process import GraphInProcess
from tests.unit.pipeline_fixtures.chain import steps as chain_steps
from tests.unit.pipeline_fixtures.chain.description import CHAIN_PACKAGE, CHAIN_TOML
from tests.unit.pipeline_fixtures.toy import model as toy_model
from tests.unit.pipeline_fixtures.workspace import Workspace
from tritonrepo.description import DescriptionError, GraphPipeline
from tritonrepo_client.control.model_calls import declared_calls
from tritonrepo_format.configs import check_ensemble

PKG = CHAIN_PACKAGE
MODELS = ("toy_prepare", "toy_first", "toy_relu", "toy_second", "toy_finish", "toy_scale")


@pytest.fixture
def ws(tmp_path, monkeypatch) -> Workspace:
    ws = Workspace(tmp_path.resolve(), monkeypatch)
    ws.write_description(CHAIN_TOML)
    return ws


def parse(path) -> mc.ModelConfig:
    return text_format.Parse(path.read_text(), mc.ModelConfig())


def numpy_reference(x: np.ndarray) -> np.ndarray:
    """The chain computed with numpy from the fixture's constants (not through the code under
    test): relu(x @ W + b) * 2, then * 3 - 1."""
    scores = x.astype(np.float64) @ toy_model.WEIGHTS + toy_model.BIAS
    return np.maximum(scores, 0) * 2 * 3 - 1


def test_a_graph_description_reads_into_cores_and_ordered_steps(ws: Workspace):
    pipeline = ws.load()
    assert isinstance(pipeline, GraphPipeline)
    assert [c.model for c in pipeline.cores.values()] == ["toy_first", "toy_second", "toy_scale"]
    assert [s.core or s.python.model for s in pipeline.steps] == [
        "toy_prepare",
        "first",
        "toy_relu",
        "second",
        "toy_finish",
    ]
    assert pipeline.steps[4].python.calls == ("scale",)
    assert pipeline.models == (
        "toy",
        "toy_prepare",
        "toy_relu",
        "toy_finish",
        *MODELS[1:4:2],
        "toy_scale",
    )


def test_the_chain_in_one_process_equals_numpy(ws: Workspace):
    pipeline = ws.load()
    models = {k: obtain_model(pipeline.core_view(k)).SerializeToString() for k in pipeline.cores}
    x = chain_steps.samples()["X"]
    got = GraphInProcess(pipeline, models)({"X": x})["OUT"]
    np.testing.assert_allclose(got, numpy_reference(x), rtol=1e-6, atol=1e-6)
    assert (numpy_reference(x) == -1).any() and (numpy_reference(x) > 0).any()  # ReLU cut some


def test_generated_files_chain_as_described(ws: Workspace):
    result = ws.run()
    assert result.rc == 0, result.err
    ensemble = parse(ws.repository / "toy/config.pbtxt")
    steps = ensemble.ensemble_scheduling.step
    assert [s.model_name for s in steps] == list(MODELS[:5])
    assert dict(steps[3].output_map) == {"scores": "doubled"}
    assert dict(steps[1].output_map) == {"scores": "scores"}
    for config_name in (None, "cpu"):
        assert check_ensemble(ws.repository, "toy", config_name) == []
    for model in MODELS:
        assert (ws.repository / model / "config.pbtxt").is_file(), model
    for core in ("toy_first", "toy_second", "toy_scale"):
        assert {p.name for p in (ws.repository / core / "configs").iterdir()} == {
            "cpu.pbtxt",
            "torch_gpu.pbtxt",
        }
    probe = ensemble.parameters["tritonrepo_probe"].string_value
    assert '"data":[1.0,1.0,1.0,1.0]' in probe  # the [probe] table, not a sample row
    assert "(GraphSuite)" in (ws.root / "tests/pipelines/test_toy.py").read_text()
    assert ws.run().out.strip().endswith("up to date (21 files)")


def test_a_function_step_with_calls_declares_them_and_the_launcher_loads_them(ws: Workspace):
    from tritonrepo.server.options import ServerOptions

    assert ws.run().rc == 0
    config = parse(ws.repository / "toy_finish/config.pbtxt")
    as_dict = json_format.MessageToDict(config, preserving_proto_field_name=True)
    assert declared_calls(as_dict) == ("toy_scale",)
    assert config.parameters["models"].string_value == "scale=toy_scale"
    options = ServerOptions(model_repository=ws.repository, models=("toy",), model_config_name=None)
    assert "toy_scale" in options.load_models


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            'inputs = ["scores"]',
            'inputs = ["doubled"]',
            "step[2].inputs: 'doubled' is neither a request tensor nor an output of an "
            "earlier step",
        ),
        (
            'outputs = { scores = "doubled" }',
            "",
            "step[3].outputs: tensor 'scores' is already made by step[1]; rename one",
        ),
        (
            '{ name = "x", dtype = "FP32", dims = [2] }',
            '{ name = "x", dtype = "FP64", dims = [2] }',
            "step[3].inputs: 'x' is FP64 [2], the model's input 'x' is FP32 [2]",
        ),
        ('core = "second"', 'core = "third"', "step[3].core: 'third' is not a [models.<key>] key"),
        ('calls = ["scale"]', "calls = []", "models.scale: no step runs or calls it"),
        (
            'outputs = { scores = "doubled" }',
            'outputs = { score = "doubled" }',
            "step[3].outputs: the model has no output 'score'",
        ),
    ],
    ids=["later-tensor", "made-twice", "dtype", "unknown-core", "unused-model", "unknown-output"],
)
def test_wiring_problems_name_the_field_and_nothing_is_written(ws, old, new, expected):
    ws.edit_description(old, new)
    result = ws.run()
    assert result.rc == 1
    assert expected in result.err, result.err
    assert ws.files() == {"other_model/config.pbtxt"}


def test_a_function_that_breaks_the_declared_outputs_is_caught_on_the_samples(ws: Workspace):
    ws.edit_description(
        'dims = [2] }]\n\n[[step]]\ncore = "second"', 'dims = [3] }]\n\n[[step]]\ncore = "second"'
    )
    result = ws.run()
    assert result.rc == 1
    assert "step[3].inputs: 'x' is FP32 [3], the model's input 'x' is FP32 [2]" in result.err


def test_an_unknown_call_and_a_missing_input_are_description_errors(ws: Workspace):
    ws.edit_description('calls = ["scale"]', 'calls = ["scaler"]')
    ws.edit_description('inputs = ["X"]', "")
    with pytest.raises(DescriptionError) as info:
        ws.load()
    text = str(info.value)
    assert "step[4].calls: 'scaler' is not a [models.<key>] key" in text
    assert "step[0].inputs: None: give a non-empty list of tensor names" in text


def test_a_canary_table_reaches_the_ensemble_and_drift_is_refused_with_its_reason(ws):
    ws.write_description(
        CHAIN_TOML + '\n[canary]\noutput = "OUT"\nmeasure = "cosine"\nmin = 0.98\n'
    )
    result = ws.run()
    assert result.rc == 0, result.err
    declared = parse(ws.repository / "toy/config.pbtxt").parameters["tritonrepo_canary"]
    assert declared.string_value == '{"output":"OUT","measure":"cosine","min":0.98}'
    ws.write_description(CHAIN_TOML + '\n[canary]\noutput = "SCORES"\n\n[drift]\n')
    with pytest.raises(DescriptionError) as info:
        ws.load()
    text = str(info.value)
    assert "canary.output" in text and "SCORES" in text
    assert "drift: input features are counted in the one model" in text
