"""The TensorRT plan builder; needs TensorRT 10 (the NGC 24.10 container), skipped elsewhere."""

from __future__ import annotations

import pytest

from tests.conftest import require_artifacts
from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.text import spec

trt = pytest.importorskip(
    "tensorrt", reason="TensorRT is not installable here; run inside tritonserver:24.10-py3"
)


def test_plan_has_the_configured_profile(tmp_path):
    from builders.text_embedding_tensorrt import build_plan

    require_artifacts()
    onnx_path = MODEL_REPOSITORY / spec.ENCODER_MODEL / "1" / "model.onnx"
    plan = tmp_path / "model.plan"
    build_plan(onnx_path, plan, "fp16")
    engine = trt.Runtime(trt.Logger(trt.Logger.WARNING)).deserialize_cuda_engine(plan.read_bytes())
    assert engine.num_optimization_profiles == 1
    for name, (lo, opt, hi) in spec.PROFILE.items():
        shapes = engine.get_tensor_profile_shape(name, 0)
        assert [tuple(s) for s in shapes] == [lo, opt, hi]
