"""The built ONNX artifact: opset, dynamic axes, checker, recorded parity (no Triton)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from tests.conftest import require_artifacts
from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.text import spec

VERSION_DIR = MODEL_REPOSITORY / spec.ENCODER_MODEL / "1"


@pytest.fixture(scope="module")
def onnx_model() -> onnx.ModelProto:
    require_artifacts()
    return onnx.load(str(VERSION_DIR / "model.onnx"))


def test_opset_and_dynamic_axes(onnx_model):
    onnx.checker.check_model(onnx_model)
    opset = max(o.version for o in onnx_model.opset_import if o.domain in ("", "ai.onnx"))
    assert opset >= 17
    tensors = {t.name: t for t in [*onnx_model.graph.input, *onnx_model.graph.output]}
    for name in spec.ENCODER_INPUTS:
        dims = tensors[name].type.tensor_type.shape.dim
        assert dims[0].dim_param and dims[1].dim_param, f"{name} batch/seq axes are not dynamic"
    dims = tensors[spec.ENCODER_OUTPUT].type.tensor_type.shape.dim
    assert len(dims) == 2 and dims[0].dim_param and dims[1].dim_value == spec.HIDDEN_SIZE


def test_build_metadata_records_passing_parity():
    require_artifacts()
    meta = json.loads((VERSION_DIR / "build_metadata.json").read_text())
    assert meta["opset"] >= 17
    assert meta["parity_max_abs_diff"]["batch_1"] < 1e-4
    assert meta["parity_max_abs_diff"]["batch_7_mixed"] < 1e-4


def test_onnx_matches_pytorch_on_real_tokens(reference_model):
    """Re-check parity here with the reference's own tokenizer and transformer module."""
    require_artifacts()
    texts = ["Batch of", "mixed length sentences, one of them longer than the others.", "x"]
    features = reference_model.tokenize(texts)
    with torch.no_grad():
        # sentence-transformers' Transformer then Pooling modules (mean pooling)
        expected = reference_model[1](reference_model[0](dict(features)))["sentence_embedding"]
        expected = expected.numpy()
    session = ort.InferenceSession(
        str(VERSION_DIR / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    ids = features["input_ids"].numpy()
    mask = features["attention_mask"].numpy()
    (got,) = session.run(None, {"input_ids": ids, "attention_mask": mask})
    assert got.shape == expected.shape == (len(texts), spec.HIDDEN_SIZE)
    assert np.abs(got - expected).max() < 1e-4


def test_ctr_build_metadata_reports_auc_parity_and_int8():
    import json

    from tritonrepo.ctr import spec as ctr_spec

    v1, v2 = (
        json.loads(
            (MODEL_REPOSITORY / ctr_spec.CORE_MODEL / str(v) / "build_metadata.json").read_text()
        )
        for v in (1, 2)
    )
    assert v1["precision"] == "fp32" and v2["precision"] == "int8"
    assert v1["training"]["heldout_auc"] >= 0.75
    assert v1["parity_max_abs_diff"] < 1e-5
    aucs = v1["heldout_auc"]
    assert set(aucs) == {"fp32", "int8_log_calibration", "int8_random_calibration"}
    assert aucs["fp32"] >= 0.75 and aucs["int8_log_calibration"] >= 0.75
    assert v2["batch_1_vs_batch_256_max_abs_diff"] == 0.0
