"""The generator on a stateful description (``[sequence]``): the shipped ``digit_stream`` is its
output (a session model with sequence batching and the core model, no ensemble), the configs
parse and declare what the session model and the client read, and a step that breaks the
contract is refused naming ``session.step`` before anything is written."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2 as mc

from builders.pipeline import generate
from tritonrepo.description import DescriptionError, load
from tritonrepo.paths import MODEL_REPOSITORY, PIPELINES
from tritonrepo.pipelines.session_step import SessionStep
from tritonrepo.step.parameters import parse
from tritonrepo_client.control.probe_declaration import declared_probe

DESCRIPTION = PIPELINES / "digit_stream" / "pipeline.toml"


def test_shipped_digit_stream_is_generated():
    assert generate.main(["pipeline", "digit_stream", "--check"]) == 0
    changes = generate.plan(load(DESCRIPTION), MODEL_REPOSITORY)
    assert {c.action for c in changes} == {"same"}
    recorded = json.loads((PIPELINES / "digit_stream" / generate.MANIFEST).read_text())
    assert recorded["files"] == {c.path: generate._digest(c.text) for c in changes}
    assert sorted(c.path for c in changes) == [
        "model_repository/digit_stream/1/model.py",
        "model_repository/digit_stream/config.pbtxt",
        "model_repository/digit_stream_model/1/.gitkeep",
        "model_repository/digit_stream_model/config.pbtxt",
        "model_repository/digit_stream_model/configs/cpu.pbtxt",
        "model_repository/digit_stream_model/configs/torch_gpu.pbtxt",
        "tests/pipelines/test_digit_stream.py",
    ]


def test_the_session_config_declares_sequence_batching_and_the_step_parameters():
    text = (MODEL_REPOSITORY / "digit_stream" / "config.pbtxt").read_text()
    config = text_format.Parse(text, mc.ModelConfig())
    assert config.backend == "python" and config.max_batch_size == 32
    seq = config.sequence_batching
    assert seq.max_sequence_idle_microseconds == 600_000_000
    assert seq.oldest.max_candidate_sequences == 20_000  # twice max_sessions
    kinds = {c.name: mc.ModelSequenceBatching.Control.Kind.Name(c.control[0].kind)
             for c in seq.control_input}  # fmt: skip
    assert kinds == {"START": "CONTROL_SEQUENCE_START", "END": "CONTROL_SEQUENCE_END",
                     "READY": "CONTROL_SEQUENCE_READY"}  # fmt: skip
    params = {k: v.string_value for k, v in config.parameters.items()}
    assert params["tritonrepo_calls"] == "digit_stream_model"
    settings = parse(SessionStep.PARAMETERS,
                     {k: v for k, v in params.items() if not k.startswith("tritonrepo")},
                     "digit_stream")  # fmt: skip
    assert settings["step"] == "pipelines.digit_stream.steps:step"
    assert settings["core_inputs"] == ("pixels",) and settings["max_sessions"] == 10_000
    assert [t["name"] for t in json.loads(settings["step_outputs"])] == ["pixels", "ROWS_SEEN"]
    probe = declared_probe(
        json_format.MessageToDict(config, preserving_proto_field_name=True), "digit_stream"
    )
    assert probe is not None and probe.sequence  # sent as a START|END one-request session
    assert probe.inputs["ROW"].shape == (1, 8)
    model_py = (MODEL_REPOSITORY / "digit_stream" / "1" / "model.py").read_text()
    assert "from tritonrepo.pipelines.session_step import SessionStep" in model_py


def returns_a_dict(state, inputs):
    return {"pixels": np.zeros((1, 64), np.float32)}


def batch_of_two(state, inputs):
    out = {"pixels": np.zeros((2, 64), np.float32), "ROWS_SEEN": np.ones((2, 1), np.int32)}
    return state, out


@pytest.mark.parametrize(
    ("step", "fragment"),
    [
        ("returns_a_dict", "returned a dict; return the pair (state, outputs)"),
        ("batch_of_two", "are not batch 1 (one event per call)"),
    ],
)
def test_a_step_breaking_the_contract_is_refused_naming_the_field(
    tmp_path: Path, step: str, fragment: str
):
    pipeline = load(DESCRIPTION)
    assert pipeline.session is not None
    bad = replace(pipeline, session=replace(pipeline.session, step=f"{__name__}:{step}"))
    with pytest.raises(DescriptionError) as info:
        generate.plan(bad, tmp_path)
    assert any(p.startswith(f"{DESCRIPTION}: session.step: ") and fragment in p
               for p in info.value.problems), info.value.problems  # fmt: skip
    assert not any(tmp_path.iterdir())
