"""The TensorRT plan builder (builders/tensorrt/plans.py).

Here, without TensorRT: the one-line message and exit status when TensorRT is missing, with
nothing written; and ``build_plan``'s checks, gate and writes with a stand-in backend that
"builds" an ONNX file and runs it with ONNX Runtime (a failed check or gate leaves nothing; a
success writes ``model.plan`` and ``plan_metadata.json`` with the keys the preflight reads).
In the builder image (``make build-plans``, TensorRT 10): real builds of every model.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from builders.gates.accuracy_gate import GateFailed, onnxrt_runner
from builders.tensorrt import engine as tensorrt_engine
from builders.tensorrt import plan_config, plan_data
from builders.tensorrt import plans as tensorrt_plans
from builders.tensorrt.plans import PlanBuildError, build_plan
from tritonrepo.ctr import spec as ctr_spec
from tritonrepo.paths import BUILD_DIR, MODEL_REPOSITORY, REPO_ROOT
from tritonrepo.text import spec as text_spec

HAVE_TENSORRT = importlib.util.find_spec("tensorrt") is not None
NO_TENSORRT = "TensorRT is not installable here; run in the builder image (make build-plans)"
needs_tensorrt = pytest.mark.skipif(not HAVE_TENSORRT, reason=NO_TENSORRT)
METADATA_KEYS = {
    "tensorrt_version",
    "gpu_name",
    "compute_capability",
    "precision",
    "profiles",
    "onnx_sha256",
    "built_at",
}


def snapshot(*folders: Path) -> dict[str, float]:
    """Every file under ``folders`` with its modification time."""
    return {
        str(p): p.stat().st_mtime
        for folder in folders
        if folder.exists()
        for p in folder.rglob("*")
    }


def repository_copy(tmp_path: Path, models=plan_config.PLAN_MODELS) -> Path:
    """``models``' configs in a fresh repository, their ONNX version folders linked in."""
    repo = tmp_path / "repo"
    for model in models:
        shutil.copytree(
            MODEL_REPOSITORY / model,
            repo / model,
            ignore=shutil.ignore_patterns("*.onnx", "*.plan", "*.json", "__pycache__", ".gitkeep"),
        )
        for onnx_file in (MODEL_REPOSITORY / model).glob("[0-9]*/model.onnx"):
            (repo / model / onnx_file.parent.name / "model.onnx").symlink_to(onnx_file)
    # The text samples are tokenized with the repository's tokenizer
    # (builders/tensorrt/plan_data.py).
    tokenizer = Path(text_spec.TOKENIZE_MODEL, "1", "tokenizer.json")
    (repo / tokenizer).parent.mkdir(parents=True)
    (repo / tokenizer).symlink_to(MODEL_REPOSITORY / tokenizer)
    return repo


# --- without TensorRT -----------------------------------------------------------------------


@pytest.mark.skipif(HAVE_TENSORRT, reason="TensorRT is installed here")
@pytest.mark.parametrize(
    "command",
    [
        ["builders.tensorrt.plans"],
        ["builders.tensorrt.plans", "--model", "ctr_session", "--precision", "int8"],
        ["builders.tensorrt.text_embedding", "--precision", "fp32"],
    ],
    ids=["all", "ctr_session-int8", "alias"],
)
def test_without_tensorrt_one_line_says_what_is_missing_and_nothing_is_written(tmp_path, command):
    repo = repository_copy(tmp_path)
    before = snapshot(repo, BUILD_DIR / "tensorrt")
    result = subprocess.run(
        [sys.executable, "-m", *command, "--repository", str(repo)],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=120,
        env=os.environ | {"PYTHONDONTWRITEBYTECODE": "1"},
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: TensorRT is not installed")
    assert "`make build-plans`" in lines[0] and "nvcr.io/nvidia/tensorrt:26.05-py3" in lines[0]
    assert snapshot(repo, BUILD_DIR / "tensorrt") == before


def test_with_tensorrt_but_a_missing_module_the_line_says_what_to_install(monkeypatch, capsys):
    missing = ["tritonclient[grpc] (reads config.pbtxt) is not installed"]
    monkeypatch.setattr(tensorrt_plans, "missing_dependencies", lambda: missing)
    assert tensorrt_plans.main(["--model", ctr_spec.CORE_MODEL]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: tritonclient[grpc] (reads config.pbtxt) is not installed; install the versions "
        "requirements.txt pins (pip install -c requirements.txt)"
    ]


# --- build_plan with a stand-in backend (ONNX Runtime plays the engine) ---------------------


class OnnxBackend:
    """A ``tensorrt_plans.Backend`` whose "engine" is an ONNX file run by ONNX Runtime."""

    def __init__(self, engine_onnx: Path, io_patch=None) -> None:
        self.engine_onnx = engine_onnx
        self.io_patch = io_patch or (lambda tensors: tensors)
        self.calls: dict[str, object] = {}

    def facts(self):
        return {"tensorrt_version": "10.5.0", "gpu_name": "stand-in", "compute_capability": "9.0"}

    def settings(self):
        return {"workspace_bytes": 1 << 30, "timing_cache": "none (stand-in)"}

    def build(self, onnx_path, profile, precision, calibration, cache):
        self.calls.update(onnx=onnx_path, profile=profile, precision=precision)
        self.calls["calibration"] = calibration
        if calibration is not None:  # as Polygraphy's Calibrator writes its cache
            cache.write_bytes(b"calibration cache")
        return self.engine_onnx

    def io(self, engine):
        return self.io_patch(plan_config.onnx_io(engine))

    def profile(self, engine, names):
        return {name: self.calls["profile"][name] for name in names}

    def runner(self, engine, name):
        return onnxrt_runner(engine, name)

    def save(self, engine, path):
        shutil.copyfile(engine, path)


@pytest.fixture
def fast_ctr_gate(monkeypatch):
    """The CTR gate on 1,024 held-out rows instead of 4,096 (the gate itself is tested in
    tests/artifacts/test_accuracy_gate.py)."""
    feeds = plan_data.ctr_gate_feeds

    monkeypatch.setattr(plan_data, "ctr_gate_feeds", lambda: feeds(num_rows=1024))


def test_successful_build_writes_plan_metadata_and_calibration_cache(tmp_path, fast_ctr_gate):
    repo = repository_copy(tmp_path, [ctr_spec.CORE_MODEL])
    backend = OnnxBackend(MODEL_REPOSITORY / ctr_spec.CORE_MODEL / "2" / "model.onnx")
    cache_dir = tmp_path / "cache"
    metadata = build_plan(ctr_spec.CORE_MODEL, repo, "int8", backend, cache_dir=cache_dir, log=str)

    version_dir = repo / ctr_spec.CORE_MODEL / "1"
    assert sorted(p.name for p in version_dir.iterdir()) == [
        "model.onnx",
        "model.plan",
        "plan_metadata.json",
    ]
    assert (version_dir / "model.plan").read_bytes() == backend.engine_onnx.read_bytes()
    written = json.loads((version_dir / "plan_metadata.json").read_text())
    assert written == metadata and written.keys() >= METADATA_KEYS
    assert written["precision"] == "int8" and written["compute_capability"] == "9.0"
    assert written["profiles"] == [
        {"input_ids": {"min": [1, 64], "opt": [32, 64], "max": [512, 64]}}
    ]
    assert written["onnx_sha256"] == tensorrt_plans.sha256(version_dir / "model.onnx")
    assert written["accuracy"]["passed"] and written["accuracy"]["rows"] == 1024
    # INT8: calibrated at the profile's OPT shape, cache renamed into place.
    assert {f["input_ids"].shape for f in backend.calls["calibration"]} == {(32, 64)}
    assert written["calibration"]["shape"] == {"input_ids": [32, 64]}
    assert sorted(p.name for p in cache_dir.iterdir()) == ["ctr_model-v1-int8.calibration.cache"]


def test_text_encoder_build_calibrates_and_gates_on_the_repositorys_tokenizer(
    tmp_path, monkeypatch
):
    """The INT8 CPU encoder (version 4) as the "engine": calibration batches of real text at
    [16, 128], the gate on 32 real texts (the full gate is
    tests/artifacts/test_accuracy_gate.py)."""
    feeds = plan_data.text_gate_feeds
    monkeypatch.setattr(plan_data, "text_gate_feeds", lambda **kw: feeds(num_texts=32, **kw))
    repo = repository_copy(tmp_path, [text_spec.ENCODER_MODEL])
    backend = OnnxBackend(MODEL_REPOSITORY / text_spec.ENCODER_MODEL / "4" / "model.onnx")
    metadata = build_plan(
        text_spec.ENCODER_MODEL, repo, "int8", backend, cache_dir=tmp_path / "cache", log=str
    )
    assert {f["input_ids"].shape for f in backend.calls["calibration"]} == {(16, 128)}
    assert metadata["accuracy"]["texts"] == 32 and metadata["accuracy"]["min_cosine"] >= 0.99
    assert metadata["profiles"] == [
        {
            name: {"min": [1, 1], "opt": [16, 128], "max": [64, 256]}
            for name in ("input_ids", "attention_mask")
        }
    ]
    assert (repo / text_spec.ENCODER_MODEL / "1" / "model.plan").is_file()


def test_an_engine_whose_io_disagrees_with_the_config_is_not_written(tmp_path):
    """An engine with FP16 output I/O under a config that says TYPE_FP32: refused before the
    gate, with the entry the config would need."""
    repo = repository_copy(tmp_path, [ctr_spec.CORE_MODEL])

    def fp16_output(tensors):
        return [replace(t, dtype="float16") if not t.is_input else t for t in tensors]

    backend = OnnxBackend(MODEL_REPOSITORY / ctr_spec.CORE_MODEL / "1" / "model.onnx", fp16_output)
    before = snapshot(repo)
    with pytest.raises(PlanBuildError, match=r'the engine has \{ name: "ctr" data_type: TYPE_FP16'):
        build_plan(ctr_spec.CORE_MODEL, repo, "fp16", backend, cache_dir=tmp_path, log=str)
    assert snapshot(repo) == before


def test_an_engine_that_fails_the_gate_is_not_written(tmp_path, fast_ctr_gate):
    """The INT8 model offered as an FP32 build: its 0.02 CTR differences fail FP32's 1e-5."""
    repo = repository_copy(tmp_path, [ctr_spec.CORE_MODEL])
    (repo / ctr_spec.CORE_MODEL / "1" / "model.plan").write_bytes(b"the previous plan")
    before = snapshot(repo)
    backend = OnnxBackend(MODEL_REPOSITORY / ctr_spec.CORE_MODEL / "2" / "model.onnx")
    with pytest.raises(GateFailed, match="max abs CTR diff"):
        build_plan(ctr_spec.CORE_MODEL, repo, "fp32", backend, cache_dir=tmp_path, log=str)
    assert snapshot(repo) == before  # the previous plan is untouched, no temporary left
    assert (repo / ctr_spec.CORE_MODEL / "1" / "model.plan").read_bytes() == b"the previous plan"


def test_a_config_that_disagrees_with_the_onnx_graph_stops_the_build_first(tmp_path):
    repo = repository_copy(tmp_path, [ctr_spec.CORE_MODEL])
    config = repo / ctr_spec.CORE_MODEL / "config.pbtxt"
    config.write_text(config.read_text().replace("TYPE_INT64", "TYPE_INT32", 1))
    backend = OnnxBackend(MODEL_REPOSITORY / ctr_spec.CORE_MODEL / "1" / "model.onnx")
    with pytest.raises(PlanBuildError, match="input 'input_ids': the config says"):
        build_plan(ctr_spec.CORE_MODEL, repo, "fp16", backend, cache_dir=tmp_path, log=str)
    assert backend.calls == {}  # nothing was built


# --- with TensorRT (the builder image) ------------------------------------------------------


@needs_tensorrt
@pytest.mark.parametrize("model", plan_config.PLAN_MODELS)
def test_fp16_plan_of_every_model_builds_fits_its_config_and_passes_the_gate(tmp_path, model):
    import tensorrt as trt

    repo = repository_copy(tmp_path, [model])
    backend = tensorrt_engine.TensorRTBackend(2 << 30, cache_dir=tmp_path / "cache")
    metadata = build_plan(model, repo, "fp16", backend, cache_dir=tmp_path / "cache")
    assert metadata.keys() >= METADATA_KEYS and metadata["accuracy"]["passed"]
    plan = repo / model / "1" / "model.plan"
    engine = trt.Runtime(trt.Logger(trt.Logger.WARNING)).deserialize_cuda_engine(plan.read_bytes())
    assert engine.num_optimization_profiles == 1
    from tritonrepo_format.configs import load_config

    profile = plan_config.model_profile(model, load_config(repo / model / "config.pbtxt"))
    for name, (lo, opt, hi) in profile.items():
        assert [tuple(s) for s in engine.get_tensor_profile_shape(name, 0)] == [lo, opt, hi]
    assert backend.timing_cache.is_file()


@needs_tensorrt
def test_int8_ctr_plan_calibrates_and_writes_its_cache(tmp_path):
    repo = repository_copy(tmp_path, [ctr_spec.CORE_MODEL])
    backend = tensorrt_engine.TensorRTBackend(2 << 30, cache_dir=tmp_path / "cache")
    metadata = build_plan(ctr_spec.CORE_MODEL, repo, "int8", backend, cache_dir=tmp_path / "cache")
    assert metadata["precision"] == "int8" and metadata["accuracy"]["passed"]
    assert (tmp_path / "cache" / "ctr_model-v1-int8.calibration.cache").stat().st_size > 0


@needs_tensorrt
def test_text_embedding_tensorrt_alias_builds_the_encoder(tmp_path):
    repo = repository_copy(tmp_path, [text_spec.ENCODER_MODEL])
    from builders.tensorrt import text_embedding as text_embedding_tensorrt

    assert text_embedding_tensorrt.main(["--repository", str(repo)]) == 0
    metadata = json.loads((repo / text_spec.ENCODER_MODEL / "1" / "plan_metadata.json").read_text())
    assert metadata.keys() >= METADATA_KEYS
    assert np.isfinite(metadata["accuracy"]["min_cosine"])


# --- described pipelines (pipelines/*/pipeline.toml) -----------------------------------------
def test_a_described_pipelines_plan_takes_profile_calibration_and_gate_from_its_description(
    tmp_path,
):
    """nudenet_detector's core: profile 0 from its config's max_batch_size (1..32, OPT 16, the
    fixed 3x320x320), INT8 calibration on its preprocessed sample photos at the OPT batch, the
    gate against ONNX Runtime FP32 on the same samples; scikit-learn's graph (ai.onnx.ml
    operators) has no plan: its config.pbtxt runs ONNX Runtime."""
    model = "nudenet_detector_model"
    # The described cores that are neural graphs have plans (digit_scans', sensor_stream's,
    # this one); scikit-learn's and LightGBM's graphs (ai.onnx.ml operators) have none.
    plans = tensorrt_plans.described_plan_models(MODEL_REPOSITORY)
    assert {"digit_scans_model", "sensor_stream_model", model} <= set(plans), plans
    assert not {"breast_cancer_model", "click_lightgbm_model"} & set(plans), plans
    repo = repository_copy(tmp_path, [model])
    backend = OnnxBackend(MODEL_REPOSITORY / model / "1" / "model.onnx")
    metadata = build_plan(model, repo, "int8", backend, cache_dir=tmp_path / "cache", log=str)
    assert metadata["profiles"] == [
        {"images": {"min": [1, 3, 320, 320], "opt": [16, 3, 320, 320], "max": [32, 3, 320, 320]}}
    ]
    assert {f["images"].shape for f in backend.calls["calibration"]} == {(16, 3, 320, 320)}
    accuracy = metadata["accuracy"]
    assert accuracy["passed"] and accuracy["rows"] == 12, accuracy
    assert accuracy["relative_max_abs"] == {"output0": 0.0}  # the stand-in engine is the graph
    assert (repo / model / "1" / "model.plan").is_file()
