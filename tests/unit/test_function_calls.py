"""The generic function step's logic (tritonrepo.pipelines.function_calls): one call per
joinable dynamic batch, per-request fallback and errors, output checks, function loading; and
FunctionStep's setup through a fake ``triton_python_backend_utils``."""

from __future__ import annotations

import json
import sys
import types
import uuid
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tritonrepo.pipelines.function_calls import (
    OutputCheckError,
    OutputSpec,
    call_batch,
    output_specs,
)
from tritonrepo.step.errors import InvalidRequest, OverLimit
from tritonrepo.step.function_refs import FunctionImportError, load_function
from tritonrepo.step.metrics import error_kind

REF = "tests.fake:double"
OUT = {"Y": OutputSpec(np.float32, (3,))}


def _item(b: int, start: float = 0.0, width: int = 3) -> dict[str, np.ndarray]:
    x = np.arange(b * width, dtype=np.float32).reshape(b, width) + start
    return {"X": x}


class Counting:
    """``Y = 2 X``; counts calls and the batch sizes it saw; raises ValueError on a negative."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        x = inputs["X"]
        self.calls.append(len(x))
        if (x < 0).any():
            raise ValueError("X must be >= 0")
        return {"Y": (2 * x).astype(np.float32)}


def _ok(result) -> dict[str, np.ndarray]:
    assert not isinstance(result, Exception), result
    return result


# --- joining and splitting -------------------------------------------------------------------
def test_joinable_items_are_computed_in_one_call():
    fn = Counting()
    items = [_item(2), _item(1, 100), _item(3, 200)]
    results = call_batch(fn, items, OUT, ref=REF)
    assert fn.calls == [6]
    for item, result in zip(items, results, strict=True):
        np.testing.assert_array_equal(_ok(result)["Y"], 2 * item["X"])
        assert result["Y"].dtype == np.float32


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=6), min_size=1, max_size=8))
def test_results_split_back_by_each_requests_batch_size(sizes):
    fn = Counting()
    items = [_item(b, 1000.0 * i) for i, b in enumerate(sizes)]
    results = call_batch(fn, items, OUT, ref=REF)
    assert len(fn.calls) == 1 and fn.calls[0] == sum(sizes)
    for item, result in zip(items, results, strict=True):
        assert _ok(result)["Y"].shape == (len(item["X"]), 3)
        np.testing.assert_array_equal(result["Y"], 2 * item["X"])


def test_a_raising_request_fails_alone_with_the_users_message():
    fn = Counting()
    bad = {"X": -np.ones((2, 3), dtype=np.float32)}
    items = [_item(1), bad, _item(2, 50)]
    results = call_batch(fn, items, OUT, ref=REF)
    assert fn.calls == [5, 1, 2, 2], "one joint try, then each request alone"
    assert isinstance(results[1], InvalidRequest)
    assert str(results[1]) == "X must be >= 0"
    assert error_kind(results[1]) == "invalid_input"
    np.testing.assert_array_equal(_ok(results[0])["Y"], 2 * items[0]["X"])
    np.testing.assert_array_equal(_ok(results[2])["Y"], 2 * items[2]["X"])


def test_items_with_different_trailing_shapes_are_called_one_by_one():
    def fn(inputs):
        calls.append(inputs["X"].shape)
        return {"Y": inputs["X"][:, :1] * 2}

    calls: list[tuple] = []
    items = [_item(2, width=3), _item(1, width=5), _item(4, width=2)]
    results = call_batch(fn, items, {"Y": OutputSpec(np.float32, (1,))}, ref=REF)
    assert calls == [(2, 3), (1, 5), (4, 2)]
    for item, result in zip(items, results, strict=True):
        np.testing.assert_array_equal(_ok(result)["Y"], 2 * item["X"][:, :1])


def test_items_with_different_dtypes_or_names_are_not_joined():
    def fn(inputs):
        calls.append(sorted(inputs))
        return {"Y": np.zeros((len(next(iter(inputs.values()))), 3), np.float32)}

    calls: list[list[str]] = []
    items = [_item(1), {"X": np.ones((1, 3), np.float64)}, {"X": np.ones((1, 3)), "Z": np.ones(1)}]
    results = call_batch(fn, items, OUT, ref=REF)
    assert len(calls) == 3
    assert all(not isinstance(r, Exception) for r in results)


def test_requests_of_one_shape_are_joined_beside_another_shape():
    fn = Counting()
    items = [_item(1), _item(2, width=4), _item(3)]
    results = call_batch(fn, items, {"Y": OutputSpec(np.float32, (-1,))}, ref=REF)
    assert sorted(fn.calls) == [2, 4]
    for item, result in zip(items, results, strict=True):
        np.testing.assert_array_equal(_ok(result)["Y"], 2 * item["X"])


def test_inputs_with_different_batch_sizes_are_that_requests_error():
    fn = Counting()
    items = [_item(2), {"X": np.ones((2, 3), np.float32), "W": np.ones((3, 1), np.float32)}]
    results = call_batch(fn, items, OUT, ref=REF)
    assert isinstance(results[1], InvalidRequest)
    assert "'X' has 2, 'W' has 3" in str(results[1])
    _ok(results[0])


def test_invalid_request_subclasses_pass_through():
    def fn(inputs):
        raise OverLimit("too many rows")

    (result,) = call_batch(fn, [_item(1)], OUT, ref=REF)
    assert type(result) is OverLimit and str(result) == "too many rows"


def test_other_exceptions_are_internal_errors_naming_the_function():
    def fn(inputs):
        return {"Y": 1 // 0}

    results = call_batch(fn, [_item(1), _item(2)], OUT, ref=REF)
    for result in results:
        assert type(result) is RuntimeError
        assert str(result) == (
            "internal error in tests.fake:double: ZeroDivisionError('integer division or modulo "
            "by zero')"
        )
        assert error_kind(result) == "internal"


def test_sys_exit_in_a_function_fails_only_the_request_that_called_it():
    """``sys.exit()`` left in a step is an internal error of the request that reached it; the
    others of the batch are answered (SystemExit is not an Exception)."""

    def fn(inputs):
        if (inputs["X"] > 100).any():
            sys.exit(3)
        return {"Y": (2 * inputs["X"]).astype(np.float32)}

    ok, bad = _item(2), _item(1, 200)
    results = call_batch(fn, [ok, bad], OUT, ref=REF)
    np.testing.assert_array_equal(_ok(results[0])["Y"], 2 * ok["X"])
    assert type(results[1]) is RuntimeError
    assert str(results[1]) == "internal error in tests.fake:double: SystemExit(3)"
    assert error_kind(results[1]) == "internal"


def test_the_default_ref_is_module_and_qualname():
    def boom(inputs):
        raise KeyError("x")

    (result,) = call_batch(boom, [_item(1)], OUT)
    where = f"{__name__}:test_the_default_ref_is_module_and_qualname.<locals>.boom"
    assert str(result) == f"internal error in {where}: KeyError('x')"


def test_nothing_raises_out_even_for_non_array_inputs():
    fn = Counting()
    results = call_batch(fn, [{"X": [1, 2]}, {"X": np.float32(1)}, _item(1)], OUT, ref=REF)
    assert isinstance(results[0], InvalidRequest) and isinstance(results[1], InvalidRequest)
    _ok(results[2])


# --- output checks -----------------------------------------------------------------------------
def _returning(value):
    return lambda inputs: value


def _check_error(value, outputs=OUT, b: int = 2) -> str:
    (result,) = call_batch(_returning(value), [_item(b)], outputs, ref=REF)
    assert isinstance(result, OutputCheckError), result
    assert isinstance(result, RuntimeError) and error_kind(result) == "internal"
    assert REF in str(result)
    return str(result)


def test_a_missing_output_is_named():
    two = {"Y": OutputSpec(np.float32, (3,)), "P": OutputSpec(np.float32, (1,))}
    message = _check_error({"Y": np.zeros((2, 3), np.float32)}, two)
    assert "missing output(s) 'P'" in message


def test_an_undeclared_output_is_named():
    message = _check_error({"Y": np.zeros((2, 3), np.float32), "extra": np.zeros(2)})
    assert "undeclared output(s) 'extra'" in message


def test_a_non_dict_result_is_refused():
    assert "returned a list" in _check_error([np.zeros((2, 3))])


def test_a_list_instead_of_an_array_is_refused():
    message = _check_error({"Y": [[0.0] * 3] * 2})
    assert "output 'Y' is a list, not a numpy array" in message


def test_a_wrong_batch_size_is_refused():
    message = _check_error({"Y": np.zeros((3, 3), np.float32)})
    assert "output 'Y' has shape [3, 3], expected [2, 3]" in message


def test_wrong_trailing_dims_are_refused_and_minus_one_matches_any():
    assert "has shape [2, 4], expected [2, 3]" in _check_error({"Y": np.zeros((2, 4), np.float32)})
    assert "has shape [2], expected [2, 3]" in _check_error({"Y": np.zeros(2, np.float32)})
    assert "has shape [2, 3, 1]" in _check_error({"Y": np.zeros((2, 3, 1), np.float32)})
    anything = {"Y": OutputSpec(np.float32, (-1, 2))}
    (result,) = call_batch(_returning({"Y": np.zeros((2, 7, 2))}), [_item(2)], anything, ref=REF)
    assert _ok(result)["Y"].shape == (2, 7, 2)


def test_a_dtype_that_does_not_cast_same_kind_is_refused():
    ints = {"Y": OutputSpec(np.int32, (3,))}
    message = _check_error({"Y": np.zeros((2, 3), np.float32)}, ints)
    assert "output 'Y' has dtype float32, expected int32" in message
    assert "has dtype <U1" in _check_error({"Y": np.full((2, 3), "a")})
    assert "has dtype object" in _check_error({"Y": np.full((2, 3), b"a", dtype=object)})


def test_same_kind_dtypes_are_cast_to_the_declared_one():
    (result,) = call_batch(_returning({"Y": np.ones((2, 3))}), [_item(2)], OUT, ref=REF)
    assert _ok(result)["Y"].dtype == np.float32
    ints = {"Y": OutputSpec(np.int32, (3,))}
    (result,) = call_batch(_returning({"Y": np.ones((2, 3), np.int64)}), [_item(2)], ints, ref=REF)
    assert _ok(result)["Y"].dtype == np.int32


def test_bytes_outputs_come_out_as_object_arrays_of_bytes():
    spec = {"L": OutputSpec(object, (1,))}
    for value in (
        np.array([["héllo"], ["b"]]),  # U
        np.array([[b"h\xc3\xa9llo"], [b"b"]]),  # S
        np.array([["héllo"], [b"b"]], dtype=object),  # mixed object
    ):
        (result,) = call_batch(_returning({"L": value}), [_item(2)], spec, ref=REF)
        out = _ok(result)["L"]
        assert out.dtype == object and out.shape == (2, 1)
        assert out.tolist() == [["héllo".encode()], [b"b"]]
        assert all(type(x) is bytes for x in out.reshape(-1))


def test_bytes_outputs_refuse_numbers():
    spec = {"L": OutputSpec(object, (1,))}
    assert "expected BYTES" in _check_error({"L": np.zeros((2, 1))}, spec)
    message = _check_error({"L": np.array([[b"a"], [3]], dtype=object)}, spec)
    assert "element [1, 0] is a int, expected bytes or str" in message


def test_a_joint_result_that_fails_the_checks_is_retried_per_request():
    """A function that collapses the batch fails the joint check; each request alone is
    checked on its own result."""

    def first_row_only(inputs):
        calls.append(len(inputs["X"]))
        return {"Y": inputs["X"][:1]}

    calls: list[int] = []
    results = call_batch(first_row_only, [_item(1), _item(2), _item(1, 9)], OUT, ref=REF)
    assert calls == [4, 1, 2, 1]
    _ok(results[0]), _ok(results[2])
    assert isinstance(results[1], OutputCheckError)
    assert "has shape [1, 3], expected [2, 3]" in str(results[1])


def test_output_specs_from_a_config():
    config = [
        {"name": "A", "data_type": "TYPE_FP32", "dims": ["-1", "3"]},
        {"name": "B", "data_type": "TYPE_STRING", "dims": [1]},
    ]
    specs = output_specs(config)
    assert specs == {
        "A": OutputSpec(np.dtype(np.float32), (-1, 3)),
        "B": OutputSpec(np.dtype(object), (1,)),
    }
    assert output_specs(config, max_batch_size=0)["A"].dims == (3,)
    with pytest.raises(ValueError, match="output 'C': data type TYPE_BF16 is not supported"):
        output_specs([{"name": "C", "data_type": "TYPE_BF16", "dims": [1]}])


# --- loading -----------------------------------------------------------------------------------
@pytest.fixture
def code_root(tmp_path: Path) -> tuple[Path, str]:
    """A fresh package ``<pkg>`` under ``tmp_path`` with ``steps.py``; removed from sys.path and
    sys.modules afterwards."""
    package = f"fn_pkg_{uuid.uuid4().hex[:8]}"
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / package / "steps.py").write_text(
        "import numpy as np\n"
        "LIMIT = 3\n"
        "def preprocess(inputs):\n"
        "    return {'Y': inputs['X'] * 2}\n"
        "class Holder:\n"
        "    @staticmethod\n"
        "    def run(inputs):\n"
        "        return inputs\n"
    )
    (tmp_path / package / "broken.py").write_text("import no_such_dependency_xyz\n")
    (tmp_path / package / "raising.py").write_text("raise RuntimeError('bad module')\n")
    saved = list(sys.path)
    yield tmp_path, package
    sys.path[:] = saved
    for name in [m for m in sys.modules if m.split(".")[0] == package]:
        del sys.modules[name]


def test_a_function_is_loaded_from_the_code_root(code_root):
    root, package = code_root
    fn = load_function(f"{package}.steps:preprocess", root)
    assert sys.path[0] == str(root.resolve())
    np.testing.assert_array_equal(fn({"X": np.ones(2)})["Y"], [2, 2])
    assert load_function(f"{package}.steps:Holder.run", root)({"a": 1}) == {"a": 1}
    load_function(f"{package}.steps:preprocess", root)
    assert sys.path.count(str(root.resolve())) == 1, "the code root is inserted once"


@pytest.mark.parametrize("ref", ["pipelines.x.steps", "a:b:c", ":f", "mod:", "a b:c", ""])
def test_a_malformed_ref_is_refused(ref):
    with pytest.raises(
        FunctionImportError, match=r"malformed: expected 'package\.module:function'"
    ):
        load_function(ref)


def test_a_missing_module_is_named_with_the_fix(code_root):
    root, package = code_root
    with pytest.raises(FunctionImportError) as caught:
        load_function(f"{package}.stepz:preprocess", root)
    message = str(caught.value)
    assert f"'{package}.stepz:preprocess'" in message
    assert f"module '{package}.stepz' not found" in message and "__init__.py" in message
    assert isinstance(caught.value, ValueError)


def test_a_missing_dependency_is_told_apart_from_a_missing_module(code_root):
    root, package = code_root
    with pytest.raises(FunctionImportError, match=r"imports 'no_such_dependency_xyz'.*install"):
        load_function(f"{package}.broken:f", root)
    with pytest.raises(FunctionImportError, match=r"raised RuntimeError\('bad module'\)"):
        load_function(f"{package}.raising:f", root)


def test_a_missing_attribute_is_named_with_a_suggestion(code_root):
    root, package = code_root
    with pytest.raises(FunctionImportError) as caught:
        load_function(f"{package}.steps:preprocesss", root)
    message = str(caught.value)
    assert f"attribute 'preprocesss' missing in '{package}.steps'" in message
    assert "did you mean 'preprocess'?" in message


def test_a_non_callable_is_refused(code_root):
    root, package = code_root
    with pytest.raises(FunctionImportError, match="it is a int, not callable"):
        load_function(f"{package}.steps:LIMIT", root)


def test_a_code_root_that_is_not_a_directory_is_refused(tmp_path):
    with pytest.raises(FunctionImportError, match=r"code root .* is not a directory"):
        load_function("m:f", tmp_path / "nope")


# --- the step ----------------------------------------------------------------------------------
class _FakeLogger:
    @staticmethod
    def log_warn(message: str) -> None:
        pass


_NUMPY = {"TYPE_FP32": np.float32, "TYPE_STRING": np.object_}


def _initialize(monkeypatch, model_dir: Path, parameters: dict[str, str]):
    from tritonrepo.pipelines.function_step import FunctionStep

    fake = types.ModuleType("triton_python_backend_utils")
    fake.Logger = _FakeLogger
    fake.triton_string_to_numpy = _NUMPY.__getitem__
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", fake)
    config = {
        "max_batch_size": 8,
        "parameters": {k: {"string_value": v} for k, v in parameters.items()},
        "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": ["3"]}],
        "output": [{"name": "Y", "data_type": "TYPE_FP32", "dims": ["3"]}],
    }
    step = FunctionStep()
    step.initialize(
        {
            "model_config": json.dumps(config),
            "model_name": "p_preprocess",
            "model_repository": str(model_dir),
            "model_version": "1",
        }
    )
    return step


def test_the_step_loads_its_function_relative_to_the_model_folder(monkeypatch, code_root):
    root, package = code_root
    model_dir = root / "model_repository" / "p_preprocess"
    model_dir.mkdir(parents=True)
    step = _initialize(monkeypatch, model_dir, {"function": f"{package}.steps:preprocess"})
    assert step.output_specs == {"Y": OutputSpec(np.dtype(np.float32), (3,))}
    (result,) = step.run([step.prepare(_item(2))])
    np.testing.assert_array_equal(_ok(result)["Y"], 2 * _item(2)["X"])


def test_the_step_fails_its_load_with_the_import_error(monkeypatch, code_root):
    from tritonrepo.step.parameters import ParameterError

    root, package = code_root
    model_dir = root / "m"
    model_dir.mkdir()
    with pytest.raises(FunctionImportError, match="not found"):
        _initialize(monkeypatch, model_dir, {"function": f"{package}.steps:x", "code_root": "."})
    with pytest.raises(FunctionImportError, match="attribute 'x' missing"):
        _initialize(monkeypatch, model_dir, {"function": f"{package}.steps:x", "code_root": ".."})
    with pytest.raises(ParameterError, match="parameter 'function' is required"):
        _initialize(monkeypatch, model_dir, {})


def test_the_stub_side_dtype_map_equals_the_repository_table():
    """Step code runs in the Triton stub, which may not import the client's table of data types
    (``tests/layers.py``), so ``function_calls`` keeps its own map: it must name the same types
    as :mod:`tritonrepo_format.dtypes`."""
    from tritonrepo.pipelines.function_calls import TRITON_DTYPES
    from tritonrepo_format.dtypes import DATA_TYPES

    want = {d.config_name: np.dtype(d.numpy_name).type for d in DATA_TYPES if d.has_numpy}
    assert {name: np.dtype(t).type for name, t in TRITON_DTYPES.items()} == want
