"""Every config parses into tritonclient's ModelConfig; ensembles are consistent graphs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from tritonrepo.ctr import spec as ctr_spec
from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.text import spec
from tritonrepo_format.config_sets import config_path
from tritonrepo_format.configs import (
    ModelConfig,
    all_config_files,
    check_ensemble,
    load_config,
)

CONFIG_FILES = all_config_files(MODEL_REPOSITORY)
ENSEMBLES = [
    p.parent.name
    for p in MODEL_REPOSITORY.glob("*/config.pbtxt")
    if load_config(p).platform == "ensemble"
]


def test_repository_has_configs():
    assert len(CONFIG_FILES) >= 5
    assert spec.ENSEMBLE in ENSEMBLES


@pytest.mark.parametrize("path", CONFIG_FILES, ids=lambda p: str(p.relative_to(MODEL_REPOSITORY)))
def test_config_parses_and_names_its_folder(path: Path):
    cfg = load_config(path)
    model_dir = path.parent if path.name == "config.pbtxt" else path.parent.parent
    assert cfg.name == model_dir.name
    if cfg.platform != "ensemble":
        assert len(cfg.instance_group) >= 1
        if cfg.HasField("sequence_batching"):
            assert cfg.sequence_batching.max_sequence_idle_microseconds > 0
        elif cfg.max_batch_size > 0:
            assert cfg.HasField("dynamic_batching"), "batching models use dynamic batching"
        else:  # per-user Python steps of ctr_ranking: variable shapes, no batching
            assert cfg.backend == "python", f"{cfg.name}: only Python steps may skip batching"


@pytest.mark.parametrize("config_name", [None, "cpu", "torch_gpu"], ids=["gpu", "cpu", "torch_gpu"])
@pytest.mark.parametrize("ensemble", ENSEMBLES)
def test_ensemble_graph_is_consistent(ensemble: str, config_name: str | None):
    assert check_ensemble(MODEL_REPOSITORY, ensemble, config_name) == []


@pytest.mark.parametrize(
    "ensemble", [e for e in ENSEMBLES if (MODEL_REPOSITORY / e / "configs").is_dir()]
)
def test_a_one_step_model_has_its_ensembles_interface(ensemble: str):
    """A set that serves a pipeline as one Python-backend model keeps the ensemble's name,
    inputs, outputs and max_batch_size, so clients see no difference."""
    composed = load_config(MODEL_REPOSITORY / ensemble / "config.pbtxt")
    for path in sorted((MODEL_REPOSITORY / ensemble / "configs").glob("*.pbtxt")):
        one = load_config(path)
        assert one.name == composed.name and one.backend == "python", path
        assert one.max_batch_size == composed.max_batch_size, path
        assert interface(one.input) == interface(composed.input), path
        assert interface(one.output) == interface(composed.output), path


def test_encoder_gpu_config_is_a_tensorrt_plan_matching_its_profile():
    cfg = load_config(MODEL_REPOSITORY / spec.ENCODER_MODEL / "config.pbtxt")
    assert cfg.platform == "tensorrt_plan"
    assert [g.kind for g in cfg.instance_group] == [mc.ModelInstanceGroup.KIND_GPU]
    for name in spec.ENCODER_INPUTS:
        (lo, _opt, hi) = spec.PROFILE[name]
        assert lo[0] == 1 and hi[0] == cfg.max_batch_size
        assert hi[1] == spec.MAX_SEQ_LENGTH
    preferred = list(cfg.dynamic_batching.preferred_batch_size)
    assert preferred and max(preferred) <= cfg.max_batch_size
    assert cfg.dynamic_batching.max_queue_delay_microseconds > 0


def interface(tensors) -> list[tuple]:
    """(name, data_type, dims) of config tensors."""
    return [(t.name, t.data_type, list(t.dims)) for t in tensors]


def test_encoder_cpu_config_has_the_same_interface():
    gpu = load_config(MODEL_REPOSITORY / spec.ENCODER_MODEL / "config.pbtxt")
    cpu = load_config(config_path(MODEL_REPOSITORY, spec.ENCODER_MODEL, "cpu"))
    assert cpu.backend == "onnxruntime_python"
    assert [g.kind for g in cpu.instance_group] == [mc.ModelInstanceGroup.KIND_CPU]
    assert cpu.max_batch_size == gpu.max_batch_size
    assert interface(cpu.input) == interface(gpu.input)
    assert list(cpu.output) == list(gpu.output)
    # CPU only: requests of any length join one batch, and the backend packs them by length.
    assert all(t.allow_ragged_batch for t in cpu.input)
    assert not any(t.allow_ragged_batch for t in gpu.input)
    assert cpu.parameters["sequence_mask_input"].string_value == "attention_mask"


def test_torch_gpu_set_runs_the_core_steps_on_the_gpu_with_the_same_interface():
    """The torch_gpu set keeps every core model's interface; the engines run on KIND_GPU and
    hand their outputs to the host once per batch, so no per-request GPU tensor reaches a
    Python step."""
    for model in (spec.ENCODER_MODEL, "ctr_model"):
        default = load_config(MODEL_REPOSITORY / model / "config.pbtxt")
        gpu = load_config(config_path(MODEL_REPOSITORY, model, "torch_gpu"))
        assert gpu.name == model and {g.kind for g in gpu.instance_group} == {
            mc.ModelInstanceGroup.KIND_GPU
        }
        assert interface(gpu.input) == interface(default.input)
        assert list(gpu.output) == list(default.output)
        assert gpu.max_batch_size >= default.max_batch_size
        assert gpu.backend == "torch_python"
        assert gpu.parameters["output_device"].string_value == "cpu"
    normalize = load_config(config_path(MODEL_REPOSITORY, spec.NORMALIZE_MODEL, "torch_gpu"))
    assert {g.kind for g in normalize.instance_group} == {mc.ModelInstanceGroup.KIND_CPU}
    encoder = load_config(MODEL_REPOSITORY / spec.ENCODER_MODEL / "config.pbtxt")
    assert [(t.name, t.data_type, list(t.dims)) for t in encoder.output] == [
        (spec.ENCODER_OUTPUT, mc.TYPE_FP32, [spec.HIDDEN_SIZE])
    ]


# --- the checker itself must catch broken ensembles ------------------------------------------


def broken_copy(tmp_path: Path, model: str, old: str, new: str) -> Path:
    repo = Path(
        shutil.copytree(
            MODEL_REPOSITORY,
            tmp_path / "repo",
            ignore=shutil.ignore_patterns("*.onnx", "__pycache__"),
        )
    )
    path = repo / model / "config.pbtxt"
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))
    return repo


@pytest.mark.parametrize(
    ("model", "old", "new", "problem"),
    [
        (
            spec.ENSEMBLE,
            'key: "sentence_embedding" value: "sentence_embedding" }\n    }',
            'key: "sentence_embeddings" value: "sentence_embedding" }\n    }',
            "'sentence_embeddings' is not an output of 'text_embedding_encoder'",
        ),
        (
            spec.ENSEMBLE,
            'input_map { key: "input_ids" value: "input_ids" }',
            'input_map { key: "input_ids" value: "ids_from_nowhere" }',
            "consumes ['ids_from_nowhere'], which no earlier step produces",
        ),
        (
            spec.NORMALIZE_MODEL,
            'name: "sentence_embedding" data_type: TYPE_FP32 dims: [ 384 ]',
            'name: "sentence_embedding" data_type: TYPE_FP16 dims: [ 384 ]',
            "expects TYPE_FP16 [batch, 384]",
        ),
        (
            spec.NORMALIZE_MODEL,
            'name: "EMBEDDING" data_type: TYPE_FP32 dims: [ 384 ]',
            'name: "EMBEDDING" data_type: TYPE_FP32 dims: [ 768 ]',
            "output 'EMBEDDING' is declared TYPE_FP32 [batch, 384] but its step produces",
        ),
        (
            spec.ENSEMBLE,
            "max_batch_size: 64",
            "max_batch_size: 128",
            "max_batch_size 128 exceeds step 'text_embedding_tokenize' max_batch_size 64",
        ),
        (
            spec.TOKENIZE_MODEL,
            "max_batch_size: 64",
            "max_batch_size: 0",
            "is TYPE_STRING [batch, 1] but 'text_embedding_tokenize' input 'TEXT' expects",
        ),
        (
            spec.ENSEMBLE,
            'platform: "ensemble"',
            'platform: "ensemble"\ninstance_group [ { kind: KIND_CPU } ]',
            "instance group should not be specified for ensemble",
        ),
    ],
    ids=[
        "unknown-output",
        "never-produced",
        "dtype",
        "dims",
        "batch-size",
        "batch-dim",
        "instance-group",
    ],
)
def test_checker_catches(tmp_path, model, old, new, problem):
    repo = broken_copy(tmp_path, model, old, new)
    problems = check_ensemble(repo, spec.ENSEMBLE)
    assert any(problem in p for p in problems), problems


def test_parse_rejects_unknown_fields():
    with pytest.raises(text_format.ParseError):
        text_format.Parse('name: "x" max_batch: 4', ModelConfig())


# --- ctr ------------------------------------------------------------------------------------


def test_ctr_model_gpu_config_matches_issue_and_profile():
    cfg = load_config(MODEL_REPOSITORY / ctr_spec.CORE_MODEL / "config.pbtxt")
    assert cfg.platform == "tensorrt_plan"
    assert [(g.kind, g.count) for g in cfg.instance_group] == [(mc.ModelInstanceGroup.KIND_GPU, 1)]
    assert list(cfg.dynamic_batching.preferred_batch_size) == [8, 16, 32]
    assert cfg.dynamic_batching.max_queue_delay_microseconds == 200
    (lo, opt, hi) = ctr_spec.PROFILE[ctr_spec.CORE_INPUT]
    assert lo[0] == 1 and hi[0] == cfg.max_batch_size >= ctr_spec.MAX_CANDIDATES
    assert opt[0] == max(cfg.dynamic_batching.preferred_batch_size)
    cpu = load_config(config_path(MODEL_REPOSITORY, ctr_spec.CORE_MODEL, "cpu"))
    assert list(cpu.input) == list(cfg.input) and list(cpu.output) == list(cfg.output)
    assert cpu.max_batch_size == cfg.max_batch_size and cpu.HasField("dynamic_batching")


def test_ctr_session_configs_declare_sequence_controls_and_state():
    kinds = mc.ModelSequenceBatching.Control
    gpu = load_config(MODEL_REPOSITORY / ctr_spec.SESSION_MODEL / "config.pbtxt")
    cpu = load_config(config_path(MODEL_REPOSITORY, ctr_spec.SESSION_MODEL, "cpu"))
    for cfg in (gpu, cpu):
        seq = cfg.sequence_batching
        controls = {c.control[0].kind: c.name for c in seq.control_input}
        assert controls == {
            kinds.CONTROL_SEQUENCE_START: "START",
            kinds.CONTROL_SEQUENCE_END: "END",
            kinds.CONTROL_SEQUENCE_READY: "READY",
        }
        assert seq.max_sequence_idle_microseconds >= 60_000_000  # human-paced sessions
        assert list(cfg.input) == list(gpu.input) and list(cfg.output) == list(gpu.output)
    (state,) = gpu.sequence_batching.state
    assert (state.input_name, list(state.dims)) == ("HISTORY_IN", [ctr_spec.HISTORY_LENGTH])
    assert state.initial_state[0].zero_data  # all padding = empty history
    assert not cpu.sequence_batching.state  # the Python backend has no implicit state
