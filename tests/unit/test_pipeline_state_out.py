"""State that comes out of the core model (``[[sequence.state]]`` with the generated session
model): the shipped ``sensor_stream`` is its description's output and its configs say who feeds
the state; the generator passes the recurrent description and prints its max difference from
the numpy reference, and refuses the documented wrong form (the state kept by the step, before
the core runs) at the first event where it shows, and a declared state that never changes; the
replay runs each event's step, core and postprocess before the next event's step; the graph's
constants and batch-second state are adapted without changing what it computes; the fields are
read and refused when wrong.

The references are the graph's recurrence in numpy (``pipelines/sensor_stream/reference.py``)
and running sums, not the code under test."""

from __future__ import annotations

import json
import sys

import numpy as np
import onnxruntime as ort
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from builders.pipeline import generate
from builders.pipeline.graph_adapt import GraphAdaptError, batch_first_states, bind_constants
from builders.pipeline.in_process import Replay
from pipelines.sensor_stream import model as sensor_model
from pipelines.sensor_stream.reference import stream
from pipelines.sensor_stream.samples import samples as sensor_samples
from tests.unit.pipeline_fixtures import recurrent
from tests.unit.pipeline_fixtures.workspace import Workspace, edited
from tritonrepo.description import DescriptionError, StateTensor, load
from tritonrepo.paths import MODEL_REPOSITORY, PIPELINES
from tritonrepo.pipelines.session_step import SessionStep
from tritonrepo.step.parameters import parse

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SENSOR = PIPELINES / "sensor_stream" / "pipeline.toml"
FIXTURES = "tests.unit.pipeline_fixtures.recurrent"
# sensor_stream's description under the workspace's name, without its comments.
RECURRENT = "\n".join(
    line.split("  #")[0].rstrip()
    for line in SENSOR.read_text().splitlines()
    if not line.startswith("#")
).replace('name = "sensor_stream"', 'name = "toy"')
STATE_TABLE = """[[sequence.state]]
input = "state"
output = "stateN"
dtype = "FP32"
dims = [3, 4]
batch_axis = 1
"""
# The documented wrong form: no [[sequence.state]], the step keeps the state and feeds it, the
# graph moved batch first by hand.
WRONG = (
    RECURRENT.replace(STATE_TABLE, "")
    .replace("pipelines.sensor_stream.steps:step", f"{FIXTURES}:step_keeping_the_state")
    .replace(
        'build = "pipelines.sensor_stream.model:build"\nconstants = { alpha = 0.1 }',
        f'build = "{FIXTURES}:build_batch_first"',
    )
)
FORGETFUL = f"""
name = "toy"
max_batch_size = 8
[[input]]
name = "X"
dtype = "FP32"
dims = [2]
[[output]]
name = "Y"
dtype = "FP32"
dims = [2]
[sequence]
idle_timeout_s = 60
[[sequence.state]]
input = "s"
output = "s_next"
dtype = "FP32"
dims = [2]
[session]
step = "{FIXTURES}:to_x"
[model]
build = "{FIXTURES}:build_forgetful"
[postprocess]
function = "{FIXTURES}:as_y"
[samples]
function = "{FIXTURES}:sum_samples"
"""


@pytest.fixture
def ws(tmp_path, monkeypatch) -> Workspace:
    return Workspace(tmp_path, monkeypatch)


def params(path) -> dict[str, str]:
    config = text_format.Parse(path.read_text(), mc.ModelConfig())
    return {k: v.string_value for k, v in config.parameters.items()}


def test_the_shipped_sensor_stream_is_generated_and_its_configs_say_who_feeds_the_state():
    assert generate.main(["pipeline", "sensor_stream", "--check"]) == 0
    folder = MODEL_REPOSITORY / "sensor_stream"
    for config_set, implicit in (("config.pbtxt", True), ("configs/cpu.pbtxt", False),
                                 ("configs/torch_gpu.pbtxt", False)):  # fmt: skip
        found = params(folder / config_set)
        settings = parse(SessionStep.PARAMETERS,
                         {k: v for k, v in found.items() if not k.startswith("tritonrepo")},
                         "sensor_stream")  # fmt: skip
        assert settings["implicit_state"] is implicit, config_set
        assert json.loads(settings["core_states"]) == [
            {"input": "state", "output": "stateN", "data_type": "TYPE_FP32", "dims": [3, 4]}
        ]
        assert settings["core_inputs"] == ("reading",)  # the state is fed, not the step's
        assert settings["core_outputs"] == (("z",) if implicit else ("z", "stateN"))
    core = MODEL_REPOSITORY / "sensor_stream_model"
    plan = text_format.Parse((core / "config.pbtxt").read_text(), mc.ModelConfig())
    assert plan.platform == "tensorrt_plan" and not plan.HasField("dynamic_batching")
    assert [t.name for t in plan.input] == ["reading"] and [t.name for t in plan.output] == ["z"]
    (state,) = plan.sequence_batching.state
    assert (state.input_name, state.output_name, list(state.dims)) == ("state", "stateN", [3, 4])
    assert state.initial_state[0].zero_data and not plan.sequence_batching.control_input
    cpu = text_format.Parse((core / "configs/cpu.pbtxt").read_text(), mc.ModelConfig())
    assert [t.name for t in cpu.input] == ["reading", "state"]
    assert [t.name for t in cpu.output] == ["z", "stateN"]
    assert cpu.HasField("dynamic_batching") and not cpu.HasField("sequence_batching")


def test_a_recurrent_description_passes_and_prints_its_max_difference(ws: Workspace):
    ws.write_description(RECURRENT)
    result = ws.run()
    assert result.rc == 0, result.err
    assert ("toy: 4 sample sessions (42 events) run event by event; state 'stateN' changed on "
            "42 of 42; against pipelines.sensor_stream.reference:stream: max abs diff 0"
            in result.out)  # fmt: skip


def test_the_documented_wrong_form_is_refused_at_the_first_event_where_it_shows(ws: Workspace):
    """The step computes the state before the core runs: every event is scored against zeros.
    The first event agrees (the state is zeros there too), the second does not."""
    assert "[[sequence.state]]" not in WRONG and "step_keeping_the_state" in WRONG
    ws.write_description(WRONG)
    result = ws.run()
    assert result.rc == 1
    assert ("session.reference: session 0 event 1: output 'Z' differs from the reference by"
            in result.err), result.err  # fmt: skip
    assert "declare it in [[sequence.state]]" in result.err
    assert not (ws.repository / "toy").exists()  # nothing written


def test_without_a_reference_the_wrong_form_gets_a_note_naming_the_state_pair(ws: Workspace):
    ws.write_description(WRONG.replace('reference = "pipelines.sensor_stream.reference:stream"',
                                       ""))  # fmt: skip
    result = ws.run()
    assert result.rc == 0, result.err
    assert ("note: toy: the core's output 'stateN' has the dtype and dims of its input 'state'"
            in result.out)  # fmt: skip
    assert "no [session] reference to compare with" in result.out


def test_a_declared_state_that_never_changes_is_refused(ws: Workspace):
    ws.write_description(FORGETFUL)
    result = ws.run()
    assert result.rc == 1
    assert ("sequence.state[0]: the core's output 's_next' equals the state fed to 's' on every "
            "sample event" in result.err), result.err  # fmt: skip


def test_the_forgetful_graph_differs_from_a_running_sum_reference(ws: Workspace):
    ws.write_description(FORGETFUL.replace("[model]", f'reference = "{FIXTURES}:running_sum"\n'
                                           "[model]"))  # fmt: skip
    result = ws.run()
    assert "session.reference: session 0 event 1: output 'Y' differs" in result.err, result.err


def test_without_a_step_the_request_goes_to_the_core_as_it_is(ws: Workspace):
    text = (
        FORGETFUL.replace('name = "X"', 'name = "x"')
        .replace(f'step = "{FIXTURES}:to_x"', f'reference = "{FIXTURES}:running_sum_x"')
        .replace("build_forgetful", "build_running_sum")
        .replace("sum_samples", "x_samples")
    )
    ws.write_description(text)
    result = ws.run()
    assert result.rc == 0, result.err
    assert "state 's_next' changed on 12 of 12" in result.out and "max abs diff 0" in result.out
    config = params(ws.repository / "toy" / "configs" / "cpu.pbtxt")
    assert "step" not in config and config["core_inputs"] == "x"
    ws.write_description(
        text.replace('name = "x"', 'name = "X"').replace("x_samples", "sum_samples")
    )
    result = ws.run()
    assert (
        "input: without [session] step the request's tensors go to the core as they are, "
        "and the core takes x FP32 [2]" in result.err
    ), result.err


def test_the_replay_runs_each_event_through_the_core_before_the_next_step():
    pipeline = load_text(FORGETFUL)
    replay = Replay(pipeline, recurrent.build_forgetful().SerializeToString())
    recurrent.CALLS.clear()
    events = recurrent.sum_samples()[1]
    runs = replay.runs(events)
    assert recurrent.CALLS == ["step", "post"] * 4
    assert [r.feeds["s"].tolist() for r in runs] == [[[0.0, 0.0]]] * 4  # forgetful: stays 0


def test_the_replay_of_the_recurrent_graph_equals_the_numpy_reference():
    pipeline = load(SENSOR)
    model = sensor_model.build()
    bind_constants(model, {"alpha": 0.1})
    batch_first_states(model, pipeline.session.states)
    replay = Replay(pipeline, model.SerializeToString())
    for events in sensor_samples():
        got, want = replay(events), stream(events)
        np.testing.assert_allclose(got["Z"], want["Z"], atol=1e-5, rtol=1e-5)
        np.testing.assert_array_equal(got["ALARM"], want["ALARM"])
    assert any(stream(s)["ALARM"].any() for s in sensor_samples())  # the spikes are seen


def load_text(text: str):
    from tritonrepo.description import parse as parse_description

    return parse_description(tomllib.loads(text), PIPELINES / "toy" / "pipeline.toml")


# --- the graph's adaptation -------------------------------------------------------------------


def test_binding_a_constant_and_moving_the_state_first_keep_what_the_graph_computes():
    original = ort.InferenceSession(sensor_model.build().SerializeToString(),
                                    providers=["CPUExecutionProvider"])  # fmt: skip
    adapted = recurrent.build_batch_first()
    session = ort.InferenceSession(adapted.SerializeToString(), providers=["CPUExecutionProvider"])
    assert [(i.name, i.shape) for i in session.get_inputs()] == [
        ("reading", ["batch", 4]), ("state", ["batch", 3, 4])
    ]  # fmt: skip
    rng = np.random.default_rng(0)
    reading = rng.normal(size=(5, 4)).astype(np.float32)
    state = np.abs(rng.normal(size=(3, 5, 4))).astype(np.float32)
    z, s_next = original.run(None, {"reading": reading, "state": state,
                                    "alpha": np.array(0.1, np.float32)})  # fmt: skip
    z2, s_next2 = session.run(None, {"reading": reading, "state": state.transpose(1, 0, 2)})
    np.testing.assert_array_equal(z, z2)
    np.testing.assert_array_equal(s_next.transpose(1, 0, 2), s_next2)


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda m: bind_constants(m, {"beta": 1.0}), "model.constants.beta: the graph has no "
         "input 'beta'"),
        (lambda m: bind_constants(m, {"alpha": [0.1, 0.2]}), "model.constants.alpha: the input "
         "has rank 0, the value 1; give a number"),
        (lambda m: batch_first_states(m, [StateTensor("state", "nope", "FP32", (3, 4), "zeros",
                                                      "initial_state", 1)]),
         "sequence.state[0].output: the graph has no output 'nope'"),
        (lambda m: batch_first_states(m, [StateTensor("state", "stateN", "FP32", (3, 4))]),
         "the graph's input 'state' is [3, 'N', 4] (N = any), the description ['batch', 3, 4]"),
        (lambda m: batch_first_states(m, [StateTensor("state", "stateN", "INT64", (3, 4),
                                                      "zeros", "initial_state", 1)]),
         "sequence.state[0].dtype: the graph's input 'state' is FP32"),
    ],
)  # fmt: skip
def test_what_the_graph_does_not_have_is_refused_naming_the_field(call, fragment):
    with pytest.raises(GraphAdaptError) as info:
        call(sensor_model.build())
    assert fragment in str(info.value)


# --- the fields ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "fragment"),
    [
        ("batch_axis = 1", "batch_axis = 3", "sequence.state[0].batch_axis: 3: give where"),
        ("constants = { alpha = 0.1 }", 'constants = { alpha = "fast" }',
         "model.constants.alpha: 'fast': give a number"),
        ('reference = "pipelines.sensor_stream.reference:stream"', 'reference = "stream"',
         "session.reference: 'stream' is not 'package.module:function'"),
        ("[sequence]\n", "[sequence]\nmax_candidate_sequences = 4\n",
         "sequence.max_candidate_sequences: belongs to a session step class"),
    ],
)  # fmt: skip
def test_a_wrong_field_is_refused_naming_it(old, new, fragment):
    with pytest.raises(DescriptionError) as info:
        load_text(edited(RECURRENT, old, new))
    assert any(fragment in p for p in info.value.problems), info.value.problems


def test_with_a_state_from_the_core_the_step_is_optional():
    text = edited(RECURRENT, 'step = "pipelines.sensor_stream.steps:step"\n', "")
    session = load_text(text).session
    assert session.step == "" and session.states[0].batch_axis == 1
    no_state = text.split("[[sequence.state]]")[0] + "[session]" + text.split("[session]")[1]
    with pytest.raises(DescriptionError, match=r"session\.step: is missing"):
        load_text(no_state)
