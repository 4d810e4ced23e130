"""The description fields of state in the core (``[[sequence.state]]``,
``sequence.max_candidate_sequences``, ``session.step_class``, ``session.calls`` tables,
``session.reference``) and of ``max_batch_size = 0``: each read, refused when wrong, rendered
into the configs; the event-by-event proof of a stateful graph fails for a graph that drops its
state; the shipped ctr_ranking and ctr_session are their descriptions' output."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from builders.pipeline import generate
from builders.pipeline.kinds.core_state import graph_config, step_class_config
from builders.pipeline.kinds.core_state_proof import prove_events
from builders.pipeline.kinds.model_calls import check_calls
from builders.pipeline.kinds.sample_checks import probe_json
from builders.pipeline.kinds.single_core import step_view
from builders.pipeline.model_configs import CoreTensor, step_config
from tests.unit.pipeline_fixtures.workspace import TOY_TOML
from tritonrepo.description import DescriptionError, ModelCall, Tensor, load, parse
from tritonrepo.paths import MODEL_REPOSITORY, PIPELINES

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SOURCE = Path("/nowhere/pipelines/acc/pipeline.toml")
# A session that sums what it is sent: the graph keeps the sum as implicit state.
ACC = """
name = "acc"
max_batch_size = 0
[[input]]
name = "X"
dtype = "FP32"
dims = [2]
[[output]]
name = "TOTAL"
dtype = "FP32"
dims = [2]
[sequence]
idle_timeout_s = 60
max_sessions = 10
max_candidate_sequences = 7
[[sequence.state]]
input = "SUM_IN"
output = "SUM_OUT"
dtype = "FP32"
dims = [2]
initial_name = "nothing_yet"
[session]
step_class = "tritonrepo.ctr.steps:CtrSessionStep"
calls = [{ model = "other", input = [{ name = "A", dtype = "INT64", dims = [4] }] }]
reference = "tests.unit.test_pipeline_core_state:running_total"
instances = 3
parameters = { core_model = "other" }
[session.torch_gpu]
instances = 5
[model]
builder = "builders.onnx_export.acc"
input = [{ name = "X", dtype = "FP32", dims = [2] }]
output = [{ name = "TOTAL", dtype = "FP32", dims = [2] }]
max_queue_delay_us = 100
[samples]
function = "tests.unit.test_pipeline_core_state:sessions"
"""


def running_total(events: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The answers to a whole session: after each event, the sum of every X so far."""
    return {"TOTAL": np.cumsum(events["X"], axis=0).astype(np.float32)}


def last_only(events: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Wrong answers for a session: each event's X alone."""
    return {"TOTAL": np.asarray(events["X"], np.float32)}


def sessions() -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    return [{"X": rng.normal(size=(n, 2)).astype(np.float32)} for n in (1, 4, 6)]


def described(text: str = ACC):
    return parse(tomllib.loads(text), SOURCE)


def problems_of(text: str) -> list[str]:
    with pytest.raises(DescriptionError) as info:
        described(text)
    return info.value.problems


def accumulator(carry_state: bool = True) -> bytes:
    """TOTAL = SUM_OUT = SUM_IN + X (or X alone when not ``carry_state``); START, END and
    READY are inputs, as Triton binds them."""
    import onnx
    from onnx import TensorProto, helper

    fp = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in ("X", "SUM_IN")]
    controls = [helper.make_tensor_value_info(n, TensorProto.INT32, [1])
                for n in ("START", "END", "READY")]  # fmt: skip
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in ("TOTAL", "SUM_OUT")]
    nodes = [
        helper.make_node("Add", ["X", "SUM_IN"], ["SUM_OUT"])
        if carry_state
        else helper.make_node("Identity", ["X"], ["SUM_OUT"]),
        helper.make_node("Identity", ["SUM_OUT"], ["TOTAL"]),
    ]
    graph = helper.make_graph(nodes, "acc", fp + controls, outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def test_state_fields_are_read():
    p = described()
    core_state = p.core_state
    assert p.models == ("acc",) and p.core.model == "acc"
    (state,) = core_state.states
    assert (state.input, state.output, state.dtype, state.dims) == ("SUM_IN", "SUM_OUT", "FP32",
                                                                    (2,))  # fmt: skip
    assert (state.initial, state.initial_name) == ("zeros", "nothing_yet")
    assert core_state.max_candidate_sequences == 7
    assert core_state.step_class == "tritonrepo.ctr.steps:CtrSessionStep"
    assert core_state.calls == (ModelCall("other", (Tensor("A", "INT64", (4,)),), ()),)
    assert core_state.reference.endswith(":running_total")
    assert {k: d.instances for k, d in core_state.deployments.items()} == {"cpu": 3, "torch_gpu": 5}


@pytest.mark.parametrize(
    ("old", "new", "field", "fragment"),
    [
        ('dtype = "FP32"\ndims = [2]\ninitial', 'dtype = "BYTES"\ndims = [2]\ninitial',
         "sequence.state[0].dtype", "numeric"),
        ("dims = [2]\ninitial_name", "dims = [0]\ninitial_name", "sequence.state[0].dims",
         "fixed sizes"),
        ('output = "SUM_OUT"', 'output = "SUM_IN"', "sequence.state[0]", "must differ"),
        ('initial_name = "nothing_yet"', 'initial = "ones"', "sequence.state[0].initial",
         "zeros"),
        ("max_candidate_sequences = 7", "max_candidate_sequences = 0",
         "sequence.max_candidate_sequences", "1 or more"),
        ('step_class = "tritonrepo.ctr.steps:CtrSessionStep"', "", "session.calls",
         "belongs to a session step class"),
        ('reference = "tests.unit.test_pipeline_core_state:running_total"', "",
         "session.reference", "is missing"),
        ('calls = [{ model = "other"', 'calls = [{ model = "Other"', "session.calls[0].model",
         "not a model name"),
        ("[model]\n", "[model]\ncpu = { instances = 2 }\n", "model.cpu", "session.step_class"),
        ('initial_name = "nothing_yet"\n', 'initial_name = "nothing_yet"\n[[sequence.state]]\n'
         'input = "SUM_IN"\noutput = "SUM_OUT"\ndtype = "FP32"\ndims = [2]\n',
         "sequence.state[1].input", "already a state tensor"),
    ],
)  # fmt: skip
def test_a_wrong_state_field_is_refused_naming_it(old, new, field, fragment):
    assert old in ACC
    problems = problems_of(ACC.replace(old, new))
    assert any(f": {field}:" in p and fragment in p for p in problems), problems


def test_step_class_without_state_is_refused():
    text = ACC.split("[[sequence.state]]")[0] + "[session]" + ACC.split("[session]")[1]
    assert any("session.step_class: keeps the state of [[sequence.state]] tables" in p
               for p in problems_of(text))  # fmt: skip


def test_batch_size_zero_is_for_step_classes_only():
    text = TOY_TOML
    assert "max_batch_size = 8" in text
    problems = problems_of(text.replace("max_batch_size = 8", "max_batch_size = 0"))
    assert any("max_batch_size: 0: give 1 or more for function steps" in p for p in problems)
    assert any(
        "max_batch_size: -1: give 1 or more" in p
        for p in problems_of(text.replace("max_batch_size = 8", "max_batch_size = -1"))
    )


def test_the_graph_config_serves_implicit_state_and_the_step_sets_the_step_class():
    p = described()
    graph = text_format.Parse(graph_config(p, '{"inputs": []}'), mc.ModelConfig())
    assert graph.platform == "tensorrt_plan" and graph.max_batch_size == 0
    (state,) = graph.sequence_batching.state
    assert (state.input_name, state.output_name, list(state.dims)) == ("SUM_IN", "SUM_OUT", [2])
    (initial,) = state.initial_state
    assert initial.zero_data and initial.name == "nothing_yet" and list(initial.dims) == [2]
    assert graph.sequence_batching.oldest.max_candidate_sequences == 7
    assert graph.sequence_batching.oldest.max_queue_delay_microseconds == 100
    assert [g.kind for g in graph.instance_group] == [mc.ModelInstanceGroup.KIND_GPU]
    assert "tritonrepo_calls" not in graph.parameters  # the graph calls nothing
    for config_set, count in (("cpu", 3), ("torch_gpu", 5)):
        step = text_format.Parse(step_class_config(p, config_set, None), mc.ModelConfig())
        assert step.backend == "python" and not step.sequence_batching.state
        assert step.instance_group[0].count == count
        params = {k: v.string_value for k, v in step.parameters.items()}
        assert params == {"max_sessions": "10", "tritonrepo_calls": "other", "core_model": "other"}


def test_a_pipeline_of_one_item_per_request_hands_the_core_all_rows():
    ranking = load(PIPELINES / "ctr_ranking" / "pipeline.toml")
    assert ranking.max_batch_size == 0
    (viewed,) = step_view(ranking, [CoreTensor("input_ids", "INT64", (64,))])
    assert viewed.dims == (-1, 64)
    config = text_format.Parse(
        step_config(ranking, ranking.preprocess, ranking.inputs, [viewed], "default"),
        mc.ModelConfig(),
    )
    assert config.max_batch_size == 0 and not config.HasField("dynamic_batching")
    probe = probe_json(ranking, {"HISTORY": np.array([[1, 2]]), "CANDIDATES": np.array([[3]]),
                                 "TOP_K": np.array([[1]], np.int32)})  # fmt: skip
    assert '"shape":[2]' in probe and '"shape":[1,2]' not in probe


def test_calls_are_checked_against_the_called_models_config(tmp_path):
    repository = tmp_path / "model_repository"
    (repository / "other").mkdir(parents=True)
    (repository / "other" / "config.pbtxt").write_text(
        'name: "other"\nbackend: "python"\nmax_batch_size: 8\n'
        'input [ { name: "A" data_type: TYPE_INT64 dims: [ 4 ] } ]\n'
        'output [ { name: "B" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
    )
    empty = tmp_path / "pipelines"

    def problems(*calls: ModelCall) -> list[str]:
        found: list[str] = []
        check_calls(calls, "session.calls", repository, found, empty)
        return found

    assert problems(ModelCall("other", (Tensor("A", "INT64", (4,)),),
                              (Tensor("B", "FP32", (1,)),))) == []  # fmt: skip
    assert problems(ModelCall("other")) == []  # the model exists; no tensors declared
    (missing,) = problems(ModelCall("othr"))
    assert "no model 'othr'" in missing and "did you mean 'other'" in missing
    (wrong,) = problems(ModelCall("other", (Tensor("A", "INT32", (4,)),)))
    assert "session.calls[0].input: A INT32 [4] does not fit" in wrong
    (unknown,) = problems(ModelCall("other", (Tensor("A", "INT64", (4,)),),
                                    (Tensor("C", "FP32", (1,)),)))  # fmt: skip
    assert "has no output 'C'" in unknown
    unknown_input, unsent = problems(ModelCall("other", (Tensor("Z", "INT64", (4,)),)))
    assert "has no input 'Z'" in unknown_input
    assert "does not send ['A'], which 'other' requires" in unsent


def test_calls_read_a_core_declared_by_another_description(tmp_path):
    found: list[str] = []
    call = ModelCall("ctr_model", (Tensor("input_ids", "INT64", (64,)),),
                     (Tensor("ctr", "FP32", (1,)),))  # fmt: skip
    check_calls([call], "session.calls", tmp_path, found, PIPELINES)  # no repository folder
    assert found == []
    check_calls([ModelCall("ctr_model", (Tensor("input_ids", "INT64", (63,)),))],
                "session.calls", tmp_path, found, PIPELINES)  # fmt: skip
    assert len(found) == 1 and "pipelines/ctr_ranking/pipeline.toml" in found[0]


def test_a_call_to_an_unknown_model_is_a_problem_past_graph_descriptions(tmp_path):
    """The shipped descriptions include graph ones (``ocr``: no single core); a call to a model
    none declares reads past them and is a problem naming the field, not an exception."""
    found: list[str] = []
    check_calls([ModelCall("no_such_model")], "session.calls", tmp_path, found, PIPELINES)
    assert len(found) == 1 and "no model 'no_such_model'" in found[0]


def test_the_stateful_graph_is_proven_event_by_event():
    p = described()
    found: list[str] = []
    proof = prove_events(p, accumulator(), sessions(), running_total, found)
    assert found == [] and (proof.sessions, proof.events) == (3, 11)
    dropped: list[str] = []
    prove_events(p, accumulator(carry_state=False), sessions(), running_total, dropped)
    assert len(dropped) == 2 and "session 1 event 1: output 'TOTAL' differs" in dropped[0]
    stateless: list[str] = []
    prove_events(p, accumulator(), sessions(), last_only, stateless)
    assert len(stateless) == 2 and all("not carried" in m for m in stateless)


@pytest.mark.parametrize("name", ["ctr_ranking", "ctr_session"])
def test_shipped_ctr_pipelines_are_generated(name):
    assert generate.main(["pipeline", name, "--check"]) == 0
    changes = generate.plan(load(PIPELINES / name / "pipeline.toml"), MODEL_REPOSITORY)
    assert {c.action for c in changes} == {"same"}


def test_the_graph_built_first_is_no_clash_and_its_proof_prints_one_line(tmp_path, capsys):
    """make pipeline asks for the stateful graph, names the one command that builds it, and
    then generates into the folder that holds it (a folder without a config is no model)."""
    repository = tmp_path / "model_repository"
    (repository / "other").mkdir(parents=True)
    (repository / "other" / "config.pbtxt").write_text(
        'name: "other"\nbackend: "python"\nmax_batch_size: 8\n'
        'input [ { name: "A" data_type: TYPE_INT64 dims: [ 4 ] } ]\n'
    )
    p = described()
    with pytest.raises(DescriptionError) as info:
        generate.plan(p, repository)
    (problem,) = info.value.problems
    assert ("model.builder: the stateful graph" in problem
            and "build it with `.venv/bin/python -m builders.onnx_export.acc`, then run `make "
            "pipeline NAME=acc` again" in problem), problem  # fmt: skip
    graph = repository / "acc" / "1" / "model.onnx"
    graph.parent.mkdir(parents=True)
    graph.write_bytes(accumulator())
    changes = generate.plan(p, repository)
    assert {c.action for c in changes} == {"create"}
    assert ("acc: the stateful graph proven event by event on 3 sample sessions (11 events) "
            "against tests.unit.test_pipeline_core_state:running_total: max abs diff"
            in capsys.readouterr().out)  # fmt: skip
