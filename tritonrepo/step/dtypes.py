"""Triton model-config data types on the stub side, in one table: each ``TYPE_*`` with its numpy
dtype (BYTES, ``TYPE_STRING``, travels as an object array of ``bytes``) and its ``torch`` dtype's
name. Stubs do not import the repository's format package (``tritonrepo_format.dtypes``, which
reads Triton's protobuf); ``tests/unit/test_stub_dtypes.py`` checks the two tables agree."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class StubDtype:
    """One ``TYPE_*``: its numpy dtype (None: numpy has none, ``TYPE_BF16``) and its ``torch``
    dtype's name (None: torch has none, ``TYPE_STRING`` and the unsigned types above 8 bits)."""

    numpy: Any
    torch: str | None


DTYPES: dict[str, StubDtype] = {
    "TYPE_BOOL": StubDtype(np.bool_, "bool"),
    "TYPE_UINT8": StubDtype(np.uint8, "uint8"),
    "TYPE_UINT16": StubDtype(np.uint16, None),
    "TYPE_UINT32": StubDtype(np.uint32, None),
    "TYPE_UINT64": StubDtype(np.uint64, None),
    "TYPE_INT8": StubDtype(np.int8, "int8"),
    "TYPE_INT16": StubDtype(np.int16, "int16"),
    "TYPE_INT32": StubDtype(np.int32, "int32"),
    "TYPE_INT64": StubDtype(np.int64, "int64"),
    "TYPE_FP16": StubDtype(np.float16, "float16"),
    "TYPE_BF16": StubDtype(None, "bfloat16"),
    "TYPE_FP32": StubDtype(np.float32, "float32"),
    "TYPE_FP64": StubDtype(np.float64, "float64"),
    "TYPE_STRING": StubDtype(np.object_, None),
}
# The types a step's numpy arrays can carry.
NUMPY_DTYPES: dict[str, Any] = {k: v.numpy for k, v in DTYPES.items() if v.numpy is not None}
# The types a torch program's tensors can carry.
TORCH_DTYPE_NAMES: dict[str, str] = {k: v.torch for k, v in DTYPES.items() if v.torch}
