"""The repository preflight (``python -m tritonrepo.server.preflight``) on real configs and
artifacts.

Each test breaks a copy of the built repository the way a deployment goes wrong and checks the
preflight names the model, the problem and the fix, before any server starts.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require_artifacts, server_options
from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.server import artifact_checks, preflight
from tritonrepo.server.launcher import LaunchError, TritonServer
from tritonrepo.server.options import default_models
from tritonrepo.text import spec


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A copy of the built repository; ONNX files are symlinks (read-only use)."""
    require_artifacts()
    dest = tmp_path / "model_repository"
    shutil.copytree(MODEL_REPOSITORY, dest, ignore=shutil.ignore_patterns("__pycache__", "*.onnx"))
    for onnx_file in MODEL_REPOSITORY.glob("*/[0-9]*/*.onnx"):
        (dest / onnx_file.relative_to(MODEL_REPOSITORY)).symlink_to(onnx_file)
    return dest


def errors(findings: list[preflight.Finding]) -> list[str]:
    return [f"{f.model}: {f.message}" for f in findings if f.level == "error"]


def test_built_repository_passes_for_the_cpu_set():
    require_artifacts()
    findings = preflight.run(
        MODEL_REPOSITORY, ("text_embedding", "ctr_ranking", "ctr_session"), "cpu"
    )
    assert errors(findings) == []
    checked = {f.model for f in findings}
    # dependencies are followed: ensemble steps and ctr_session's BLS target
    assert {spec.TOKENIZE_MODEL, spec.ENCODER_MODEL, spec.NORMALIZE_MODEL, "ctr_model"} <= checked


def test_cli_reports_missing_plans_for_the_gpu_set_and_exits_1(repo):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "tritonrepo.server.preflight",
            "--repository",
            str(repo),
            "--model-config-name",
            "",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1
    assert (
        f"error   {spec.ENCODER_MODEL}: 1/model.plan is missing; build it with `make build-plans`"
        in out.stdout
    )
    # Every TensorRT core the default models call is named, and only those: the plans are
    # derived here from the copied configs (the ONNX Runtime cores have none).
    served = preflight.dependencies(repo, default_models(repo), "")
    plans = sorted(
        m for m in served if 'platform: "tensorrt_plan"' in (repo / m / "config.pbtxt").read_text()
    )
    assert {"nudenet_detector_model", "digit_scans_model"} <= set(plans), plans
    missing = re.findall(r"^error   (\S+): 1/model\.plan is missing", out.stdout, re.M)
    assert sorted(missing) == plans, out.stdout
    assert f"preflight: {len(plans)} errors" in out.stdout


def test_plan_for_another_gpu_or_too_small_a_profile_is_refused(repo, monkeypatch):
    folder = repo / spec.ENCODER_MODEL / "1"
    (folder / "model.plan").write_bytes(b"not a real plan")
    profile = {"min": [1, 1], "opt": [16, 128], "max": [32, 256]}  # config says 64
    metadata = {
        "tensorrt_version": "10.5.0",
        "gpu_name": "NVIDIA A100-SXM4-80GB",
        "compute_capability": "8.0",
        "precision": "fp16",
        "profiles": [{"input_ids": profile, "attention_mask": profile}],
        "onnx_sha256": "0" * 64,
        "built_at": "2026-11-30T00:00:00+00:00",
    }
    (folder / "plan_metadata.json").write_text(json.dumps(metadata))
    monkeypatch.setattr(artifact_checks, "gpu_facts", lambda: ("NVIDIA H200", "9.0"))
    monkeypatch.setattr(artifact_checks, "module_version", lambda name: "10.5.0")
    found = errors(preflight.check_model(repo, spec.ENCODER_MODEL, None))
    assert any(
        "built for NVIDIA A100-SXM4-80GB (compute capability 8.0); this GPU is "
        "NVIDIA H200 (9.0): rebuild it here with `make build-plans`" in e
        for e in found
    )
    assert any("ends at batch 32 < max_batch_size 64" in e for e in found)
    # Without a GPU or TensorRT, those comparisons are skipped and said so.
    monkeypatch.setattr(artifact_checks, "gpu_facts", lambda: None)
    monkeypatch.setattr(artifact_checks, "module_version", lambda name: None)
    findings = preflight.check_model(repo, spec.ENCODER_MODEL, None)
    skipped = [f.message for f in findings if f.level == "skipped"]
    assert any("no GPU visible" in m for m in skipped)
    assert any("TensorRT's Python module is not installed" in m for m in skipped)


def test_python_model_without_model_py_is_refused(repo):
    (repo / spec.NORMALIZE_MODEL / "1" / "model.py").unlink()
    assert errors(preflight.check_model(repo, spec.NORMALIZE_MODEL, "cpu")) == [
        f"{spec.NORMALIZE_MODEL}: 1/model.py is missing"
    ]


def test_config_that_disagrees_with_the_onnx_graph_is_refused(repo):
    cpu = repo / spec.ENCODER_MODEL / "configs" / "cpu.pbtxt"
    text = cpu.read_text().replace("dims: [ 384 ]", "dims: [ 768 ]")
    text = text.replace(
        'name: "attention_mask" data_type: TYPE_INT64',
        'name: "attention_mask" data_type: TYPE_INT32',
    )
    cpu.write_text(text)
    found = errors(preflight.check_model(repo, spec.ENCODER_MODEL, "cpu"))
    assert any("'sentence_embedding' has dims [768] in the config but [384]" in e for e in found)
    assert any(
        "'attention_mask' is TYPE_INT32 in the config but element type 7" in e for e in found
    )


def test_torch_program_from_another_pytorch_is_refused(repo):
    folder = repo / "ctr_model" / "1"
    (folder / "model.pt2").write_bytes(b"x")
    (folder / "torch_metadata.json").write_text(
        json.dumps({"torch_version": "0.0.1", "max_batch": 512})
    )
    found = errors(preflight.check_model(repo, "ctr_model", "torch_gpu"))
    assert any("exported with PyTorch 0.0.1" in e and "make artifacts-gpu" in e for e in found)


def test_too_little_shared_memory_is_refused(tmp_path):
    assert preflight.check_shm(3).level == "ok"
    finding = preflight.check_shm(10**6)  # a million Python instances: 32 TiB
    assert finding.level == "error" and "--shm-size=1g" in finding.message
    assert preflight.check_shm(1, tmp_path / "absent").level == "skipped"


def test_launcher_runs_preflight_before_starting(repo):
    (repo / "ctr_model" / "1" / "model.onnx").unlink()
    server = TritonServer(server_options(model_repository=repo))
    with pytest.raises(
        LaunchError, match=r"preflight: model 'ctr_model': 1/model\.onnx is missing"
    ):
        server.start()
    assert server.process is None


@pytest.mark.parametrize(
    ("old", "new", "reason"),
    [
        (
            'name: "sentence_embedding" data_type: TYPE_FP32',
            'name: "sentence_embedding" data_type: TYPE_FP23',
            'Enum type "inference.DataType" has no value named TYPE_FP23.',
        ),
        (
            "max_batch_size: 64",
            "max_batch_sise: 64",
            'Message type "inference.ModelConfig" has no field named "max_batch_sise".',
        ),
    ],
)
def test_config_typo_is_one_line_naming_file_line_and_column(repo, old, new, reason):
    """A typo in a step's config.pbtxt: the preflight CLI and the launcher say
    ``<file>:<line>:<column>: <protobuf's reason>`` in one line, not a traceback."""
    config = repo / spec.NORMALIZE_MODEL / "config.pbtxt"
    text = config.read_text()
    assert old in text
    config.write_text(text.replace(old, new))
    line_no = next(i for i, ln in enumerate(config.read_text().splitlines(), 1) if new in ln)
    place = rf"{re.escape(str(config))}:{line_no}:\d+: .*{re.escape(reason)}"
    out = subprocess.run(
        [sys.executable, "-m", "tritonrepo.server.preflight", "--repository", str(repo),
         "--model", spec.ENSEMBLE],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 1 and "Traceback" not in out.stdout + out.stderr, out.stderr
    errors_seen = [ln for ln in out.stdout.splitlines() if ln.startswith("error")]
    assert errors_seen and all(re.search(place, ln) for ln in errors_seen), out.stdout
    server = TritonServer(server_options(model_repository=repo, models=(spec.ENSEMBLE,)))
    with pytest.raises(LaunchError, match=place):
        server.start()
    assert server.process is None


@pytest.mark.parametrize("config_name", ["cpu", "torch_gpu"])
def test_every_listed_artifact_is_one_the_checks_require(repo, config_name):
    """The list the GPU pack is made from (``required_artifacts``, ``--list-artifacts``) and
    the checks are one: each listed file, removed, is named missing by its model's checks; the
    command's default models are the launcher's (read from the configs)."""
    from tritonrepo.server.options import default_models

    models = default_models(repo)
    assert {"text_embedding", "image_classification", "breast_cancer"} <= set(models)
    listed = preflight.required_artifacts(repo, models, config_name)
    assert {a.role for a in listed} >= {"config", "model", "tokenizer_file", "labels_file"}
    for artifact in listed:
        if artifact.role == "config":
            continue
        path = repo / artifact.path
        if not path.exists():  # a torch program: stand one in (make artifacts-gpu)
            path.write_text("{}" if artifact.role == "torch_metadata" else "")
        held = path.with_name(path.name + ".held")
        path.rename(held)
        try:
            found = errors(preflight.check_model(repo, artifact.model, config_name))
        finally:
            held.rename(path)
        where = str(artifact.path.relative_to(artifact.model))
        assert any(where in e and "missing" in e for e in found), (artifact, found)
    out = subprocess.run(
        [sys.executable, "-m", "tritonrepo.server.preflight", "--repository", str(repo),
         "--model-config-name", config_name, "--list-artifacts"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert out.stdout.splitlines() == [f"{a.build}\t{a.path}" for a in listed]
