"""Each GPU config agrees with its built ONNX graph and the TensorRT profile derived from it
(needs `make artifacts`)."""

from __future__ import annotations

import pytest

from builders.tensorrt.plan_config import (
    PLAN_MODELS,
    check_config,
    check_profile,
    model_profile,
    onnx_io,
)
from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo_format.configs import ModelConfig, load_config


def gpu_config(model: str) -> ModelConfig:
    return load_config(MODEL_REPOSITORY / model / "config.pbtxt")


@pytest.mark.parametrize("model", PLAN_MODELS)
def test_gpu_config_agrees_with_its_onnx_graph_and_profile(model):
    cfg = gpu_config(model)
    assert cfg.platform == "tensorrt_plan"
    onnx_path = MODEL_REPOSITORY / model / "1" / "model.onnx"
    if not onnx_path.is_file():
        pytest.fail(f"{onnx_path} is missing: run `make artifacts`")
    graph = onnx_io(onnx_path)
    profile = model_profile(model, cfg)
    assert check_config(cfg, graph) == []
    assert check_profile(profile, graph, cfg) == []
    inputs = {t.name for t in graph if t.is_input}
    for name, (lo, _opt, hi) in profile.items():
        assert name in inputs
        if cfg.max_batch_size > 0:
            assert (lo[0], hi[0]) == (1, cfg.max_batch_size)
