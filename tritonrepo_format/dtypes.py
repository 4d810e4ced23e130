"""Triton's data types in one table: the KServe v2 name (``FP32``), the model-config enum
(``TYPE_FP32``), the numpy type and the ONNX element type of each.

Sources: Triton's ``model_config.proto`` (``DataType``; BYTES is ``TYPE_STRING`` there), the
KServe v2 protocol's tensor data types, and ONNX's ``TensorProto.DataType`` numbers. BF16 has no
numpy type (numpy has no bfloat16), so it is absent from :data:`NUMPY_TYPES`; its numpy-style
name ``bfloat16`` is the one TensorRT and PyTorch use.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc


@dataclass(frozen=True)
class DataType:
    """One data type.

    Attributes:
        name: KServe v2 / Triton name (``"FP32"``, ``"BYTES"``).
        numpy_name: numpy-style name (``"float32"``; ``"object"`` for BYTES, ``"bfloat16"``).
        onnx: ONNX ``TensorProto`` element type.
        has_numpy: whether numpy has the type.
    """

    name: str
    numpy_name: str
    onnx: int
    has_numpy: bool = True

    @property
    def config_name(self) -> str:
        """The model-config enum's name (``TYPE_FP32``; ``TYPE_STRING`` for BYTES)."""
        return "TYPE_STRING" if self.name == "BYTES" else f"TYPE_{self.name}"

    @property
    def config_value(self) -> int:
        """The model-config enum's value (``model_config_pb2.TYPE_FP32``)."""
        return mc.DataType.Value(self.config_name)


DATA_TYPES: tuple[DataType, ...] = (
    DataType("BOOL", "bool", 9),
    DataType("UINT8", "uint8", 2),
    DataType("UINT16", "uint16", 4),
    DataType("UINT32", "uint32", 12),
    DataType("UINT64", "uint64", 13),
    DataType("INT8", "int8", 3),
    DataType("INT16", "int16", 5),
    DataType("INT32", "int32", 6),
    DataType("INT64", "int64", 7),
    DataType("FP16", "float16", 10),
    DataType("FP32", "float32", 1),
    DataType("FP64", "float64", 11),
    DataType("BF16", "bfloat16", 16, has_numpy=False),
    DataType("BYTES", "object", 8),
)
BY_NAME = {d.name: d for d in DATA_TYPES}

# Triton name -> numpy scalar type (np.float32, np.object_ for BYTES); BF16 absent.
NUMPY_TYPES: dict[str, type] = {
    d.name: np.dtype(d.numpy_name).type for d in DATA_TYPES if d.has_numpy
}
# numpy-style name -> model-config enum name ("float32" -> "TYPE_FP32"), BF16 included.
CONFIG_NAMES_BY_NUMPY = {d.numpy_name: d.config_name for d in DATA_TYPES}
# ONNX element type -> model-config enum value, BF16 included.
CONFIG_VALUES_BY_ONNX = {d.onnx: d.config_value for d in DATA_TYPES}
# ONNX element type -> Triton name, for the types numpy has (BF16 absent).
NAMES_BY_ONNX = {d.onnx: d.name for d in DATA_TYPES if d.has_numpy}

__all__ = [
    "BY_NAME",
    "CONFIG_NAMES_BY_NUMPY",
    "CONFIG_VALUES_BY_ONNX",
    "DATA_TYPES",
    "NAMES_BY_ONNX",
    "NUMPY_TYPES",
    "DataType",
]
