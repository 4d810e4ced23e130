"""The image classifiers in the TensorRT plan builder, without TensorRT: profile from config and
spec, real-photo calibration at the OPT shape, and the accuracy gate, with ONNX Runtime playing
the engine (the CPU INT8 version as an "INT8 engine"). The real TensorRT builds are
``tests/artifacts/test_tensorrt_builder.py``'s (skipped where TensorRT 10 is not installable)."""

from __future__ import annotations

import numpy as np
import pytest

from builders.gates.accuracy_gate import GateFailed, onnxrt_runner
from builders.tensorrt import image_plan_data, plan_config
from builders.tensorrt.plans import build_plan
from tests.artifacts.test_tensorrt_builder import OnnxBackend, repository_copy
from tritonrepo.image import spec
from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo_format.configs import load_config


@pytest.mark.parametrize("model", [spec.CORE_MODEL, spec.RESNET50_MODEL])
def test_profile_is_batch_1_to_32_opt_16(model):
    profile = plan_config.model_profile(
        model, load_config(MODEL_REPOSITORY / model / "config.pbtxt")
    )
    assert profile == {"pixels": ((1, 3, 224, 224), (16, 3, 224, 224), (32, 3, 224, 224))}


def test_int8_build_calibrates_on_photos_and_passes_the_gate(tmp_path):
    repo = repository_copy(tmp_path, [spec.CORE_MODEL])
    backend = OnnxBackend(MODEL_REPOSITORY / spec.CORE_MODEL / "2" / "model.onnx")
    metadata = build_plan(spec.CORE_MODEL, repo, "int8", backend, cache_dir=tmp_path, log=str)
    calibration = backend.calls["calibration"]
    assert len(calibration) == image_plan_data.CALIBRATION_IMAGES // 16
    assert all(feed["pixels"].shape == (16, 3, 224, 224) for feed in calibration)
    pixels = np.concatenate([feed["pixels"] for feed in calibration])
    assert len(np.unique(pixels.reshape(len(pixels), -1)[:, :1000], axis=0)) == len(pixels)
    accuracy = metadata["accuracy"]
    assert accuracy["passed"] and accuracy["top1_agreement"] >= 0.85, accuracy
    assert (repo / spec.CORE_MODEL / "1" / "model.plan").is_file()


def test_fp32_gate_refuses_an_engine_that_computes_something_else():
    reference = onnxrt_runner(MODEL_REPOSITORY / spec.CORE_MODEL / "1" / "model.onnx", "fp32")
    same = onnxrt_runner(MODEL_REPOSITORY / spec.CORE_MODEL / "1" / "model.onnx", "same")
    int8 = onnxrt_runner(MODEL_REPOSITORY / spec.CORE_MODEL / "2" / "model.onnx", "int8")
    feeds = image_plan_data.gate_feeds(spec.CORE_MODEL)[:2]
    figures = image_plan_data.run_gate(spec.CORE_MODEL, reference, same, "fp32", feeds)
    assert figures["top1_agreement"] == 1.0 and figures["max_abs_prob_diff"] == 0.0
    with pytest.raises(GateFailed, match="max abs probability diff"):
        image_plan_data.run_gate(spec.CORE_MODEL, reference, int8, "fp32", feeds)
