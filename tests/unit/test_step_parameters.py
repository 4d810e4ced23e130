"""Typed step parameters (tritonrepo.step.parameters): every real config parses through its
step's declaration, bad values fail with the model and key named, and the declared defaults
are the values the steps used before the declarations (their old ``self.parameter(key,
default)`` literals, and the runners' own keyword defaults)."""

from __future__ import annotations

import importlib.util
import inspect
import json
from functools import cache
from pathlib import Path

import pytest

from tritonrepo.ctr import spec as ctr_spec
from tritonrepo.image import spec as image_spec
from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.pipelines.one_step import OneStep
from tritonrepo.runners.onnx_runner import OnnxRunner
from tritonrepo.step.parameters import NON_STEP_KEYS, REQUIRED, Parameter, ParameterError, parse
from tritonrepo.step.python_step import PythonStep
from tritonrepo.text import spec as text_spec
from tritonrepo_client.control.probe_declaration import PROBE_PARAMETER
from tritonrepo_format.configs import all_config_files, load_config

ROOT = MODEL_REPOSITORY.parent
STEP_BACKENDS = ("python", "onnxruntime_python", "torch_python")


@cache
def _model_class(path: Path) -> type[PythonStep]:
    """``TritonPythonModel`` of a ``model.py``, imported from its file as the stub does."""
    spec = importlib.util.spec_from_file_location(f"_model_{abs(hash(path))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.TritonPythonModel


def _step_classes(config_path: Path) -> list[type[PythonStep]]:
    """The step classes that read this config: the Python backend's ``<version>/model.py``
    files, or the Python-based backend's ``backends/<backend>/model.py``."""
    cfg = load_config(config_path)
    if cfg.backend == "python":
        model_dir = MODEL_REPOSITORY / cfg.name
        found = [_model_class(p) for p in sorted(model_dir.glob("[0-9]*/model.py"))]
        # A one-step model's model.py serves every set: the class this config runs.
        return [c.form(cfg.parameters) if issubclass(c, OneStep) else c for c in found]
    return [_model_class(ROOT / "backends" / cfg.backend / "model.py")]


def _step_configs() -> list[Path]:
    return [
        p for p in all_config_files(MODEL_REPOSITORY) if load_config(p).backend in STEP_BACKENDS
    ]


def _values(config_path: Path) -> dict[str, str]:
    return {k: v.string_value for k, v in load_config(config_path).parameters.items()}


def _id(path: Path) -> str:
    return str(path.relative_to(MODEL_REPOSITORY))


def test_every_python_step_config_is_found():
    """The scan below covers the step models of every config set (not vacuous)."""
    names = {load_config(p).name for p in _step_configs()}
    assert {
        "text_embedding_tokenize",
        "text_embedding_normalize",
        "text_embedding_encoder",
        "image_preprocess",
        "image_postprocess",
        "image_classifier",
        "ctr_preprocess",
        "ctr_postprocess",
        "ctr_session",
        "ctr_model",
    } <= names


@pytest.mark.parametrize("config_path", _step_configs(), ids=_id)
def test_every_real_config_parses_through_its_steps_declaration(config_path: Path):
    values = _values(config_path)
    classes = _step_classes(config_path)
    assert classes, config_path
    for cls in classes:
        settings = parse(cls.PARAMETERS, values, load_config(config_path).name)
        assert set(settings) == {p.name for p in cls.PARAMETERS}
        for parameter in cls.PARAMETERS:
            if parameter.name not in values:
                assert settings[parameter.name] == parameter.default


def test_real_config_values_come_out_typed():
    tokenize = MODEL_REPOSITORY / "text_embedding_tokenize" / "config.pbtxt"
    settings = parse(_step_classes(tokenize)[0].PARAMETERS, _values(tokenize), "t")
    assert settings == {
        "tokenizer_file": "tokenizer.json",
        "max_seq_length": 256,
        "max_text_bytes": 65536,
    }
    encoder = MODEL_REPOSITORY / "text_embedding_encoder" / "configs" / "torch_gpu.pbtxt"
    settings = parse(_step_classes(encoder)[0].PARAMETERS, _values(encoder), "e")
    assert settings["sequence_axis_inputs"] == ("input_ids", "attention_mask")
    assert settings["cuda_graph_rows"] == (1, 2, 4, 8, 16, 32, 64)
    assert settings["cuda_graph_positions"] == (16, 32, 64, 128, 256)
    assert settings["output_device"] == "cpu"
    cpu = MODEL_REPOSITORY / "ctr_model" / "configs" / "cpu.pbtxt"
    settings = parse(_step_classes(cpu)[0].PARAMETERS, _values(cpu), "c")
    assert settings["allow_spinning"] is False and settings["intra_op_threads"] == 0


def _backend(name: str) -> type[PythonStep]:
    return _model_class(ROOT / "backends" / name / "model.py")


def _step(module: str, name: str) -> type[PythonStep]:
    return getattr(importlib.import_module(module), name)


def _defaults(cls: type[PythonStep]) -> dict:
    return {p.name: p.default for p in cls.PARAMETERS}


def test_defaults_are_the_values_used_before():
    runner = {
        k: v.default
        for k, v in inspect.signature(OnnxRunner.__init__).parameters.items()
        if v.default is not inspect.Parameter.empty
    }
    assert _defaults(_backend("onnxruntime_python")) == {
        "intra_op_threads": runner["intra_op_threads"],  # int("0")
        "allow_spinning": runner["allow_spinning"],  # "1" != "0"
        "sequence_mask_input": runner["sequence_mask"],  # "" or None
        "packing_max_tokens": runner["max_tokens"],  # int("2048")
        "packing_max_padding": runner["max_padding"],  # float("0.1")
    }
    assert (runner["intra_op_threads"], runner["max_tokens"], runner["max_padding"]) == (
        0,
        2048,
        0.1,
    )
    assert _defaults(_backend("torch_python")) == {
        "sequence_axis_inputs": (),  # _names("")
        "sequence_axis_outputs": (),
        "output_device": None,  # "" or None
        "cuda_graph_rows": (),  # "": no graphs
        "cuda_graph_positions": (),
    }
    assert _defaults(_step("tritonrepo.text.steps", "TokenizeStep")) == {
        "tokenizer_file": "tokenizer.json",
        "max_seq_length": REQUIRED,  # self.parameter("max_seq_length"): KeyError when absent
        "max_text_bytes": 65536,  # str(spec.MAX_TEXT_BYTES)
    }
    assert text_spec.MAX_TEXT_BYTES == 65536
    assert _defaults(_step("tritonrepo.ctr.steps", "CtrSessionStep")) == {
        "max_sessions": REQUIRED,
        "core_model": ctr_spec.CORE_MODEL,
    }
    assert ctr_spec.CORE_MODEL == "ctr_model"
    assert _defaults(_step("tritonrepo.image.steps", "PreprocessStep")) == {
        "preprocessing": "efficientnet_lite0",
        "max_image_pixels": 40_000_000,  # spec.MAX_IMAGE_PIXELS
        "max_request_pixels": 120_000_000,  # spec.MAX_REQUEST_PIXELS
        "decode_device": "cpu",  # Pillow on the stub's core unless a config set says cuda
    }
    assert _defaults(_step("tritonrepo.image.steps", "PostprocessStep")) == {
        "labels_file": image_spec.LABELS_FILE
    }
    for name in ("PreprocessStep", "PostprocessStep"):
        assert _step("tritonrepo.ctr.steps", name).PARAMETERS == ()
    assert _step("tritonrepo.text.steps", "NormalizeStep").PARAMETERS == ()


TOKENIZE = ("tritonrepo.text.steps", "TokenizeStep")
BAD_VALUES = [
    (
        TOKENIZE,
        {"max_seq_length": "abc"},
        "text_embedding_tokenize: parameter 'max_seq_length' = 'abc' is not an integer (tokens)",
    ),
    (
        TOKENIZE,
        {"max_seq_length": "1"},
        "parameter 'max_seq_length' = '1' is below the minimum 2 (tokens)",
    ),
    (
        TOKENIZE,
        {"max_seq_length": "256", "max_text_bytes": "0"},
        "parameter 'max_text_bytes' = '0' is below the minimum 1 (bytes)",
    ),
    (TOKENIZE, {}, "parameter 'max_seq_length' is required"),
    (
        ("tritonrepo.image.steps", "PreprocessStep"),
        {"preprocessing": "vgg"},
        "parameter 'preprocessing' = 'vgg' is not one of 'efficientnet_lite0'",
    ),
    (
        ("tritonrepo.ctr.steps", "CtrSessionStep"),
        {"max_sessions": "-5"},
        "parameter 'max_sessions' = '-5' is below the minimum 1 (sessions)",
    ),
    (
        ("backends", "onnxruntime_python"),
        {"packing_max_padding": "1.5"},
        "parameter 'packing_max_padding' = '1.5' is above the maximum 1",
    ),
    (
        ("backends", "onnxruntime_python"),
        {"allow_spinning": "yes"},
        "parameter 'allow_spinning' = 'yes' is not '0' or '1'",
    ),
    (
        ("backends", "onnxruntime_python"),
        {"intra_op_threads": "2.5"},
        "parameter 'intra_op_threads' = '2.5' is not an integer (threads)",
    ),
    (
        ("backends", "torch_python"),
        {"cuda_graph_rows": "1,x"},
        "parameter 'cuda_graph_rows' = '1,x' is not comma-separated positive integers (rows)",
    ),
    (
        ("backends", "torch_python"),
        {"cuda_graph_rows": "0,2"},
        "parameter 'cuda_graph_rows' = '0,2' is not comma-separated positive integers",
    ),
    (
        TOKENIZE,
        {"max_seq_length": "256", "max_text_byte": "1024"},
        "unknown parameter 'max_text_byte' (did you mean 'max_text_bytes'?)",
    ),
    (
        ("tritonrepo.text.steps", "NormalizeStep"),
        {"epsilon": "1e-12"},
        "unknown parameter 'epsilon'; this model's parameters: none",
    ),
]


def _class(where: tuple[str, str]) -> type[PythonStep]:
    return _backend(where[1]) if where[0] == "backends" else _step(*where)


@pytest.mark.parametrize(("where", "values", "message"), BAD_VALUES, ids=lambda x: str(x)[:40])
def test_a_bad_value_names_the_model_and_the_key(where, values, message):
    model = "text_embedding_tokenize" if where == TOKENIZE else "m"
    with pytest.raises(ParameterError) as caught:
        parse(_class(where).PARAMETERS, values, model)
    assert message in str(caught.value)
    assert str(caught.value).startswith(f"{model}: ")
    assert isinstance(caught.value, ValueError)


def test_every_problem_is_in_the_one_error():
    with pytest.raises(ParameterError) as caught:
        parse(_class(TOKENIZE).PARAMETERS, {"max_seq_length": "x", "max_text_bytes": "-1"}, "t")
    assert len(caught.value.problems) == 2
    assert "'max_seq_length' = 'x'" in str(caught.value)
    assert "'max_text_bytes' = '-1'" in str(caught.value)


def test_keys_of_other_readers_are_not_reported():
    assert PROBE_PARAMETER in NON_STEP_KEYS
    values = {"max_seq_length": "256", **dict.fromkeys(NON_STEP_KEYS, "x")}
    assert parse(_class(TOKENIZE).PARAMETERS, values, "t")["max_seq_length"] == 256


def test_empty_optional_string_is_the_default_and_names_drop_empty_entries():
    declared = (
        Parameter("mask", "str", None, "input", "m"),
        Parameter("file", "str", "a.txt", "file", "f"),
        Parameter("names", "names", (), "inputs", "n"),
    )
    assert parse(declared, {"mask": "", "names": " a, ,b "}, "m") == {
        "mask": None,
        "file": "a.txt",
        "names": ("a", "b"),
    }
    with pytest.raises(ParameterError, match="parameter 'file' = '' is empty"):
        parse(declared, {"file": ""}, "m")
    for text in ("nan", "inf"):
        with pytest.raises(ParameterError, match="is not a finite number"):
            parse((Parameter("x", "float", 0.1),), {"x": text}, "m")


class _FakeLogger:
    @staticmethod
    def log_warn(message: str) -> None:
        pass


def test_initialize_fails_the_load_with_the_named_error(monkeypatch):
    """What Triton's Python backend does with a bad config: ``initialize`` raises, and the
    load error is the exception's text."""
    import sys
    import types

    fake = types.ModuleType("triton_python_backend_utils")
    fake.Logger = _FakeLogger
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", fake)
    step = _class(TOKENIZE)()
    config = {
        "parameters": {"max_seq_length": {"string_value": "abc"}},
        "input": [],
        "output": [],
    }
    args = {
        "model_config": json.dumps(config),
        "model_name": "text_embedding_tokenize",
        "model_repository": str(MODEL_REPOSITORY / "text_embedding_tokenize"),
        "model_version": "1",
    }
    with pytest.raises(ParameterError) as caught:
        step.initialize(args)
    assert str(caught.value) == (
        "text_embedding_tokenize: parameter 'max_seq_length' = 'abc' is not an integer (tokens)"
    )


def test_the_keys_the_control_plane_writes_are_never_unknown():
    """A reload by ``configs use``, by self-healing or with a declared probe adds its own key to
    the config, and a model that calls others through BLS declares them; a step must not refuse
    either."""
    from tritonrepo.step.parameters import NON_STEP_KEYS
    from tritonrepo_client.control.config_sets import CONFIG_SET_PARAMETER
    from tritonrepo_client.control.healing.healer import RESTART_PARAMETER
    from tritonrepo_client.control.model_calls import CALLS_PARAMETER
    from tritonrepo_client.control.probe_declaration import PROBE_PARAMETER
    from tritonrepo_client.control.rollout import PREVIOUS_VERSION_PARAMETER

    written = {CONFIG_SET_PARAMETER, RESTART_PARAMETER, PROBE_PARAMETER, PREVIOUS_VERSION_PARAMETER}
    written.add(CALLS_PARAMETER)  # declared by hand or by the generator, read by the launcher
    assert written <= set(NON_STEP_KEYS)
