"""ONNX Runtime static INT8 quantization, the one recipe of the builders that stage an INT8
version (``builders.onnx_export.image``, ``builders.pipeline.build``): QDQ format, per-channel
symmetric INT8 weights, symmetric INT8 activations, MinMax calibration, the layout TensorRT
reads (ONNX Runtime's ``quantize_static``, after its ``quant_pre_process``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import numpy as np


def quantize_qdq(
    fp32_path: Path,
    out_path: Path,
    batches: Iterable[Mapping[str, np.ndarray]],
    nodes: Callable[[Path], list[str]] | None = None,
) -> None:
    """Quantize ``fp32_path`` into ``out_path``, calibrated on ``batches`` (each a feed of the
    graph's inputs, batch-first, of the FP32 graph's dtypes); ``nodes`` picks the nodes to
    quantize from the prepared graph's file (default: every node ONNX Runtime can).

    Raises:
        onnxruntime's errors: the graph cannot be prepared or quantized (nothing is left under
            ``out_path``'s temporary ``.prep.onnx`` name).
    """
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.batches = iter(batches)

        def get_next(self) -> dict[str, np.ndarray] | None:
            batch = next(self.batches, None)
            return None if batch is None else dict(batch)

    out_path.parent.mkdir(parents=True, exist_ok=True)
    prepared = out_path.with_suffix(".prep.onnx")
    quant_pre_process(str(fp32_path), str(prepared), skip_symbolic_shape=True)
    try:
        quantize_static(
            str(prepared),
            str(out_path),
            Reader(),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QInt8,
            weight_type=QuantType.QInt8,
            calibrate_method=CalibrationMethod.MinMax,
            nodes_to_quantize=nodes(prepared) if nodes is not None else None,
            extra_options={"ActivationSymmetric": True, "WeightSymmetric": True},
        )
    finally:
        prepared.unlink(missing_ok=True)
