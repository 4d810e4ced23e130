"""The stub side's data-type table (tritonrepo/step/dtypes.py) agrees with the repository's
format (tritonrepo_format/dtypes.py, read from Triton's protobuf): the same TYPE_* names, and the
same numpy dtype for each."""

from __future__ import annotations

import numpy as np

from tritonrepo.step.dtypes import DTYPES, NUMPY_DTYPES, TORCH_DTYPE_NAMES
from tritonrepo_format.dtypes import DATA_TYPES


def test_the_stub_table_has_every_type_of_the_format_with_the_same_numpy_dtype() -> None:
    format_types = {d.config_name: d for d in DATA_TYPES}
    assert set(DTYPES) == set(format_types)
    assert set(NUMPY_DTYPES) == {n for n, d in format_types.items() if d.has_numpy}
    for name, numpy_type in NUMPY_DTYPES.items():
        assert np.dtype(numpy_type) == np.dtype(format_types[name].numpy_name), name


def test_torch_names_are_torch_dtypes() -> None:
    import torch

    for name, torch_name in TORCH_DTYPE_NAMES.items():
        assert isinstance(getattr(torch, torch_name), torch.dtype), name
