"""Engine I/O -> config entries, and every GPU config against its ONNX graph and profile
(builders/tensorrt/plan_config.py). No TensorRT needed: engines are described by (name, dtype,
shape)."""

from __future__ import annotations

import pytest
from google.protobuf import text_format

from builders.tensorrt.engine import engine_dtype_name
from builders.tensorrt.plan_config import (
    ConfigTensor,
    IOTensor,
    check_config,
    check_profile,
    config_tensors,
    model_profile,
    profile_json,
)
from tritonrepo.ctr import spec as ctr_spec
from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.text import spec as text_spec
from tritonrepo_format.configs import ModelConfig, load_config


def gpu_config(model: str) -> ModelConfig:
    return load_config(MODEL_REPOSITORY / model / "config.pbtxt")


def parse(text: str) -> ModelConfig:
    return text_format.Parse(text, ModelConfig())


# --- engine I/O -> config entries (synthetic engines) ---------------------------------------


def test_batched_engine_io_maps_to_entries_without_the_batch_dim():
    engine = [
        IOTensor("input_ids", engine_dtype_name("INT64"), (-1, -1), True),
        IOTensor("attention_mask", engine_dtype_name("INT64"), (-1, -1), True),
        IOTensor("token_embeddings", engine_dtype_name("HALF"), (-1, -1, 384), False),
    ]
    inputs, outputs = config_tensors(engine, max_batch_size=64)
    assert inputs == [
        ConfigTensor("input_ids", "TYPE_INT64", (-1,)),
        ConfigTensor("attention_mask", "TYPE_INT64", (-1,)),
    ]
    assert outputs == [ConfigTensor("token_embeddings", "TYPE_FP16", (-1, 384))]
    assert outputs[0].pbtxt() == (
        '{ name: "token_embeddings" data_type: TYPE_FP16 dims: [ -1, 384 ] }'
    )


def test_unbatched_engine_io_keeps_full_shapes_and_skips_sequence_tensors():
    engine = [
        IOTensor("ITEM_ID", "int64", (1,), True),
        IOTensor("CANDIDATES", "int64", (-1,), True),
        IOTensor("HISTORY_IN", "int64", (63,), True),
        IOTensor("START", "int32", (1,), True),
        IOTensor("SCORES", "float32", (-1,), False),
        IOTensor("HISTORY_OUT", "int64", (63,), False),
    ]
    inputs, outputs = config_tensors(engine, 0, exclude={"HISTORY_IN", "HISTORY_OUT", "START"})
    assert inputs == [
        ConfigTensor("ITEM_ID", "TYPE_INT64", (1,)),
        ConfigTensor("CANDIDATES", "TYPE_INT64", (-1,)),
    ]
    assert outputs == [ConfigTensor("SCORES", "TYPE_FP32", (-1,))]


@pytest.mark.parametrize(
    ("tensor", "message"),
    [
        (IOTensor("x", engine_dtype_name("FP8"), (-1, 4), True), "type fp8, which Triton cannot"),
        (IOTensor("x", "float32", (8, 4), True), "first dimension must be the dynamic batch"),
        (IOTensor("x", "float32", (), True), "first dimension must be the dynamic batch"),
    ],
    ids=["fp8", "fixed-batch", "scalar"],
)
def test_engine_io_that_no_config_can_serve_is_refused(tensor, message):
    with pytest.raises(ValueError, match=message):
        config_tensors([tensor], max_batch_size=8)


def test_engine_dtype_names_follow_tensorrt_backend_conversion():
    # tensorrt_backend src/tensorrt_utils.cc ConvertTrtTypeToDataType
    names = {n: engine_dtype_name(n) for n in ("FLOAT", "HALF", "BF16", "INT32", "INT64", "BOOL")}
    assert names == {
        "FLOAT": "float32",
        "HALF": "float16",
        "BF16": "bfloat16",
        "INT32": "int32",
        "INT64": "int64",
        "BOOL": "bool",
    }


# --- check_config -----------------------------------------------------------------------


ENCODER_ENGINE = [
    IOTensor("input_ids", "int64", (-1, -1), True),
    IOTensor("attention_mask", "int64", (-1, -1), True),
    IOTensor("sentence_embedding", "float32", (-1, 384), False),
]


def test_encoder_config_agrees_with_an_fp16_build_that_keeps_fp32_io():
    """An FP16 build of the FP32 export keeps FP32 I/O: the config stays TYPE_FP32."""
    assert check_config(gpu_config(text_spec.ENCODER_MODEL), ENCODER_ENGINE) == []


@pytest.mark.parametrize(
    ("engine", "problem"),
    [
        (
            [*ENCODER_ENGINE[:2], IOTensor("sentence_embedding", "float16", (-1, 384), False)],
            "output 'sentence_embedding': the config says { name: \"sentence_embedding\" "
            'data_type: TYPE_FP32 dims: [ 384 ] }, the engine has { name: "sentence_embedding" '
            "data_type: TYPE_FP16 dims: [ 384 ] }",
        ),
        (
            [IOTensor("input_ids", "int32", (-1, -1), True), *ENCODER_ENGINE[1:]],
            "input 'input_ids': the config says",
        ),
        (ENCODER_ENGINE[1:], "config input 'input_ids' is not a model input of the engine"),
        (
            [*ENCODER_ENGINE, IOTensor("token_type_ids", "int64", (-1, -1), True)],
            'the engine has input { name: "token_type_ids" data_type: TYPE_INT64 dims: [ -1 ] }',
        ),
        (
            [*ENCODER_ENGINE[:2], IOTensor("sentence_embedding", "float32", (64, 384), False)],
            "first dimension must be the dynamic batch",
        ),
    ],
    ids=["fp16-output", "int32-ids", "missing-input", "extra-input", "fixed-batch"],
)
def test_check_config_names_each_disagreement(engine, problem):
    problems = check_config(gpu_config(text_spec.ENCODER_MODEL), engine)
    assert any(problem in p for p in problems), problems


SESSION_ENGINE = [
    IOTensor("ITEM_ID", "int64", (1,), True),
    IOTensor("CANDIDATES", "int64", (-1,), True),
    IOTensor("HISTORY_IN", "int64", (63,), True),
    IOTensor("START", "int32", (1,), True),
    IOTensor("END", "int32", (1,), True),
    IOTensor("READY", "int32", (1,), True),
    IOTensor("ITEM_IDS", "int64", (-1,), False),
    IOTensor("SCORES", "float32", (-1,), False),
    IOTensor("HISTORY_OUT", "int64", (63,), False),
]


def test_session_config_agrees_with_its_engine_io():
    assert check_config(gpu_config(ctr_spec.SESSION_MODEL), SESSION_ENGINE) == []


@pytest.mark.parametrize(
    ("drop", "replace", "problem"),
    [
        ("END", None, "state/control input 'END' of sequence_batching is not in the engine"),
        (
            "HISTORY_IN",
            IOTensor("HISTORY_IN", "int64", (64,), True),
            "'HISTORY_IN': sequence_batching needs TYPE_INT64 [63], the engine has TYPE_INT64 [64]",
        ),
        (
            "START",
            IOTensor("START", "bool", (1,), True),
            "'START': sequence_batching needs TYPE_INT32 [1], the engine has TYPE_BOOL [1]",
        ),
        ("HISTORY_OUT", None, "state output 'HISTORY_OUT' of sequence_batching is not in"),
    ],
    ids=["no-END", "state-dims", "control-type", "no-state-output"],
)
def test_check_config_checks_state_and_control_tensors(drop, replace, problem):
    engine = [t for t in SESSION_ENGINE if t.name != drop] + ([replace] if replace else [])
    problems = check_config(gpu_config(ctr_spec.SESSION_MODEL), engine)
    assert any(problem in p for p in problems), problems


def test_state_names_must_sort_in_the_same_order():
    """Triton pairs state inputs and outputs by sorted name: A_IN->Z_OUT with B_IN->Y_OUT
    sorts the outputs the other way round."""
    cfg = parse(
        """
        name: "m" max_batch_size: 0
        sequence_batching {
          state [ { input_name: "A_IN" output_name: "Z_OUT" data_type: TYPE_FP32 dims: [ 2 ] },
                  { input_name: "B_IN" output_name: "Y_OUT" data_type: TYPE_FP32 dims: [ 2 ] } ]
        }
        """
    )
    engine = [
        IOTensor(n, "float32", (2,), n.endswith("IN")) for n in ("A_IN", "B_IN", "Y_OUT", "Z_OUT")
    ]
    assert any("do not sort in the same order" in p for p in check_config(cfg, engine))
    cfg.sequence_batching.state[0].output_name, cfg.sequence_batching.state[1].output_name = (
        "Y_OUT",
        "Z_OUT",
    )
    assert check_config(cfg, engine) == []


# --- every GPU config against its ONNX graph and profile --------------------------------


def test_profiles_come_from_config_and_spec():
    encoder = model_profile(text_spec.ENCODER_MODEL, gpu_config(text_spec.ENCODER_MODEL))
    assert encoder == text_spec.PROFILE
    assert profile_json(encoder)["input_ids"] == {"min": [1, 1], "opt": [16, 128], "max": [64, 256]}
    assert model_profile(ctr_spec.CORE_MODEL, gpu_config(ctr_spec.CORE_MODEL)) == ctr_spec.PROFILE
    session = model_profile(ctr_spec.SESSION_MODEL, gpu_config(ctr_spec.SESSION_MODEL))
    assert session == {"CANDIDATES": ((1,), (32,), (ctr_spec.MAX_CANDIDATES,))}


@pytest.mark.parametrize(
    ("model", "max_batch_size", "message"),
    [
        (text_spec.ENCODER_MODEL, 128, "the spec's PROFILE .* disagrees with config.pbtxt"),
        (ctr_spec.CORE_MODEL, 64, "the spec's PROFILE .* disagrees with config.pbtxt"),
        (ctr_spec.SESSION_MODEL, 8, "max_batch_size must be 0"),
        (ctr_spec.CORE_MODEL, 0, "the config must batch"),
    ],
)
def test_profile_refuses_a_config_that_disagrees_with_the_spec(model, max_batch_size, message):
    cfg = gpu_config(model)
    cfg.max_batch_size = max_batch_size
    with pytest.raises(ValueError, match=message):
        model_profile(model, cfg)


def test_check_profile_names_each_problem():
    cfg = gpu_config(ctr_spec.CORE_MODEL)
    graph = [
        IOTensor("input_ids", "int64", (-1, 64), True),
        IOTensor("ctr", "float32", (-1, 1), False),
    ]
    bad = {"input_ids": ((1, 64), (32, 64), (256, 64))}
    assert any("must be 1..512" in p for p in check_profile(bad, graph, cfg))
    bad = {"input_ids": ((1, 32), (32, 64), (512, 64))}
    assert any("axis 1 must be 64 (fixed)" in p for p in check_profile(bad, graph, cfg))
    assert any("has no profile entry" in p for p in check_profile({}, graph, cfg))
    bad = {"ids": ((1, 64), (32, 64), (512, 64))}
    assert any("'ids' is not an input" in p for p in check_profile(bad, graph, cfg))
