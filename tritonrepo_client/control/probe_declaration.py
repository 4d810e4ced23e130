"""A model's own health probe, declared in its config so that any client reads it through the
model-config endpoint (``GET /v2/models/<model>/config``, open without the repository key).

The declaration is the config parameter ``tritonrepo_probe``: a JSON object whose ``inputs``
are KServe v2 JSON input tensors (``name``, ``datatype``, ``shape``, flat row-major ``data``;
the request format of the KServe v2 inference protocol, "Request JSON Object" / "Tensor Data"),
and whose optional ``outputs`` say what must come back::

    parameters {
      key: "tritonrepo_probe"
      value { string_value: '{"inputs": [{"name": "X", "datatype": "FP32", "shape": [1, 2],
        "data": [1.0, 2.0]}], "outputs": [{"name": "Y", "shape": [1, 2], "data": [1.0, 2.0]}]}' }
    }

Each ``outputs`` entry names an output; ``shape``, ``datatype`` and ``data`` are optional and,
when given, must match (numbers within ``atol`` + ``rtol`` x |expected|, default 1e-5 each;
BYTES items exactly). Where the values depend on trained weights, bounds say what any healthy
model answers instead: ``min`` and ``max`` (every value within them), ``values_in`` (every
value one of these, e.g. the candidates sent) and ``order`` (``"descending"`` or
``"ascending"`` along the last axis). Without ``outputs``, every output of the config is
requested and must come back, numbers finite. BYTES input and expected items are UTF-8
strings, or ``{"b64": "..."}`` for binary data (an image). A model with ``sequence_batching``
gets the probe as a one-request sequence (START and END, a random numeric correlation ID below
2^53, which a JSON reader in JavaScript keeps exact), which leaves no state behind.
"""

from __future__ import annotations

import base64
import binascii
import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tritonclient.utils import triton_to_np_dtype

from tritonrepo_client.connection import ClientError, TritonConnection
from tritonrepo_format.roles import PROBE_PARAMETER

DEFAULT_TOLERANCE = 1e-5


class InvalidProbe(ClientError):
    """A model's ``tritonrepo_probe`` parameter is not a valid declaration; the message says
    what is wrong."""


@dataclass(frozen=True)
class ExpectedOutput:
    """One output the probe checks: its name and, when not None, its shape, datatype and
    values (flat, row-major)."""

    name: str
    shape: tuple[int, ...] | None = None
    datatype: str | None = None
    data: np.ndarray | None = None
    atol: float = DEFAULT_TOLERANCE
    rtol: float = DEFAULT_TOLERANCE
    low: float | None = None  # "min"
    high: float | None = None  # "max"
    values_in: tuple[float, ...] | None = None
    order: str | None = None  # "descending" | "ascending", along the last axis

    @property
    def checks_values(self) -> bool:
        """Whether anything beyond shape and dtype is checked."""
        bounds = (self.low, self.high, self.values_in, self.order)
        return self.data is not None or any(b is not None for b in bounds)


ORDERS = ("descending", "ascending")


@dataclass(frozen=True)
class DeclaredProbe:
    """A probe read from a model's config (:func:`declared_probe`); call it like the built-in
    probes of :mod:`tritonrepo_client.control.health`: ``probe(conn, model)`` returns a detail line
    or
    raises :class:`ClientError`."""

    inputs: dict[str, np.ndarray]
    outputs: tuple[ExpectedOutput, ...]
    sequence: bool = False

    def __call__(self, conn: TritonConnection, model: str) -> str:
        """Send the probe inputs to ``model`` and check its outputs.

        Raises:
            ClientError: the inference failed or an output is missing or differs.
        """
        extra: dict[str, Any] = {}
        if self.sequence:
            extra = {
                # Below 2^53: the HTTP guard reads JSON numbers as JavaScript doubles.
                "sequence_id": 1 + secrets.randbelow(2**53 - 1),
                "sequence_start": True,
                "sequence_end": True,
            }
        names = [o.name for o in self.outputs]
        got = conn.infer(model, self.inputs, names, **extra)
        for expected in self.outputs:
            _check_output(expected, got.get(expected.name))
        checked = ", ".join(
            f"{o.name} {list(got[o.name].shape)}" + (" as declared" if o.checks_values else "")
            for o in self.outputs
        )
        return f"declared probe answered: {checked}"


def declared_probe(config: dict[str, Any], model: str) -> DeclaredProbe | None:
    """The probe that ``config`` (ModelConfig JSON, as the model-config endpoint returns it)
    declares in its ``tritonrepo_probe`` parameter, or None when it declares none.

    Raises:
        InvalidProbe: the parameter is there but not a valid declaration (the module
            docstring gives the format).
    """
    text = config.get("parameters", {}).get(PROBE_PARAMETER, {}).get("string_value")
    if text is None or not text.strip():
        return None
    where = f"parameter {PROBE_PARAMETER} of model '{model}'"
    try:
        spec = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidProbe(f"{where} is not JSON: {exc}") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("inputs"), list) or not spec["inputs"]:
        raise InvalidProbe(f"{where} needs an object with a non-empty list 'inputs'")
    inputs = {}
    for i, tensor in enumerate(spec["inputs"]):
        name, array = _input_tensor(tensor, f"{where}, inputs[{i}]")
        if name in inputs:
            raise InvalidProbe(f"{where}, inputs[{i}]: '{name}' is given twice")
        inputs[name] = array
    declared_outputs = spec.get("outputs")
    if declared_outputs is None:
        outputs = tuple(ExpectedOutput(o["name"]) for o in config.get("output", []))
    elif isinstance(declared_outputs, list) and declared_outputs:
        outputs = tuple(
            _expected_output(o, f"{where}, outputs[{i}]") for i, o in enumerate(declared_outputs)
        )
    else:
        raise InvalidProbe(f"{where}: 'outputs' must be a non-empty list when given")
    if not outputs:
        raise InvalidProbe(f"{where}: the config has no outputs to check")
    names = [o.name for o in outputs]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InvalidProbe(f"{where}: outputs {twice} are declared twice; declare each once")
    return DeclaredProbe(inputs, outputs, sequence="sequence_batching" in config)


def _input_tensor(tensor: Any, where: str) -> tuple[str, np.ndarray]:
    if not isinstance(tensor, dict) or not all(k in tensor for k in ("name", "datatype", "data")):
        raise InvalidProbe(f"{where} needs 'name', 'datatype', 'shape' and 'data'")
    shape = _shape(tensor.get("shape"), where)
    if shape is None:
        raise InvalidProbe(f"{where} needs 'shape' (a list of non-negative integers)")
    return str(tensor["name"]), _array(tensor["data"], str(tensor["datatype"]), shape, where)


OUTPUT_KEYS = (
    "name",
    "shape",
    "datatype",
    "data",
    "atol",
    "rtol",
    "min",
    "max",
    "values_in",
    "order",
)
BOUNDS = ("min", "max", "values_in", "order")


def _number(value: Any, field: str, where: str) -> float:
    """``value`` as a finite float; booleans and anything else refused, naming ``field``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
        raise InvalidProbe(f"{where}: '{field}' is {value!r}; give a finite number")
    return float(value)


def _expected_output(entry: Any, where: str) -> ExpectedOutput:
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        raise InvalidProbe(f"{where} needs 'name'")
    unknown = sorted(set(entry) - set(OUTPUT_KEYS))
    if unknown:
        import difflib

        hints = [
            f"'{k}'"
            + (
                f" (did you mean '{m[0]}'?)"
                if (m := difflib.get_close_matches(k, OUTPUT_KEYS, 1))
                else ""
            )
            for k in unknown
        ]
        raise InvalidProbe(f"{where}: unknown field {', '.join(hints)}; known: {list(OUTPUT_KEYS)}")
    if entry.get("datatype") == "BYTES" and any(b in entry for b in BOUNDS):
        raise InvalidProbe(
            f"{where}: {[b for b in BOUNDS if b in entry]} bound numbers; a BYTES output is "
            "checked by its 'data'"
        )
    shape = _shape(entry.get("shape"), where)
    datatype = entry.get("datatype")
    data = None
    if "data" in entry:
        if datatype is None:
            raise InvalidProbe(f"{where}: 'data' needs 'datatype' (e.g. \"FP32\")")
        data = _array(entry["data"], str(datatype), None, where)
        if shape is not None and data.size != int(np.prod(shape)):
            raise InvalidProbe(f"{where}: {data.size} values for shape {list(shape)}")
    atol = _number(entry.get("atol", DEFAULT_TOLERANCE), "atol", where)
    rtol = _number(entry.get("rtol", DEFAULT_TOLERANCE), "rtol", where)
    low = _number(entry["min"], "min", where) if "min" in entry else None
    high = _number(entry["max"], "max", where) if "max" in entry else None
    if low is not None and high is not None and low > high:
        raise InvalidProbe(f"{where}: 'min' {low} is above 'max' {high}; no answer could pass")
    values_in = entry.get("values_in")
    if values_in is not None:
        if not isinstance(values_in, list) or not values_in:
            raise InvalidProbe(f"{where}: 'values_in' is {values_in!r}; give a non-empty list")
        values_in = tuple(_number(v, "values_in", where) for v in values_in)
    order = entry.get("order")
    if order is not None and order not in ORDERS:
        raise InvalidProbe(f"{where}: 'order' is {order!r}; give one of {list(ORDERS)}")
    return ExpectedOutput(
        entry["name"], shape, datatype, data, atol, rtol, low, high, values_in, order
    )


def _shape(value: Any, where: str) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in value
    ):
        raise InvalidProbe(f"{where}: 'shape' must be a list of non-negative integers")
    return tuple(value)


def _array(data: Any, datatype: str, shape: Sequence[int] | None, where: str) -> np.ndarray:
    """Flat KServe v2 JSON ``data`` of ``datatype`` as a numpy array of ``shape`` (flat when
    None)."""
    flat = np.asarray(data, dtype=object).reshape(-1) if isinstance(data, list) else None
    if flat is None:
        raise InvalidProbe(f"{where}: 'data' must be a list (flat, row-major)")
    try:
        if datatype == "BYTES":
            array = np.array([_bytes(item, where) for item in flat], dtype=object)
        else:
            dtype = triton_to_np_dtype(datatype)
            if dtype is None:
                raise InvalidProbe(f"{where}: unknown datatype {datatype!r}")
            array = np.array(flat.tolist(), dtype=dtype)
        return array if shape is None else array.reshape(shape)
    except (TypeError, ValueError) as exc:
        raise InvalidProbe(
            f"{where}: 'data' does not fit {datatype} {list(shape or [])}: {exc}"
        ) from None


def _bytes(item: Any, where: str) -> bytes:
    if isinstance(item, str):
        return item.encode("utf-8")
    if isinstance(item, dict) and isinstance(item.get("b64"), str):
        try:
            return base64.b64decode(item["b64"], validate=True)
        except binascii.Error as exc:
            raise InvalidProbe(f"{where}: a 'b64' item is not base64 ({exc})") from None
    raise InvalidProbe(f'{where}: BYTES items are strings or {{"b64": "..."}}, got {item!r}')


def _check_output(expected: ExpectedOutput, got: np.ndarray | None) -> None:
    """Raise ClientError when ``got`` does not satisfy ``expected``."""
    name = expected.name
    if got is None:
        raise ClientError(f"the probe's output {name} did not come back")
    if expected.shape is not None and tuple(got.shape) != expected.shape:
        raise ClientError(f"{name} has shape {list(got.shape)}, declared {list(expected.shape)}")
    if got.dtype == object:
        if expected.data is not None:
            items = [x if isinstance(x, bytes) else str(x).encode() for x in got.reshape(-1)]
            if items != list(expected.data):
                raise ClientError(f"{name} is {items[:4]!r}..., declared {expected.data[:4]!r}...")
        return
    if expected.datatype is not None and got.dtype != triton_to_np_dtype(expected.datatype):
        raise ClientError(f"{name} has dtype {got.dtype}, declared {expected.datatype}")
    if np.issubdtype(got.dtype, np.floating) and not np.isfinite(got).all():
        raise ClientError(f"{name} holds NaN or infinite values")
    if expected.data is not None:
        values = got.reshape(-1)
        want = expected.data.reshape(-1)
        if values.size != want.size or not np.allclose(
            values.astype(np.float64),
            want.astype(np.float64),
            rtol=expected.rtol,
            atol=expected.atol,
        ):
            diff = (
                float(np.max(np.abs(values.astype(np.float64) - want)))
                if values.size == want.size
                else float("nan")
            )
            raise ClientError(
                f"{name} differs from the declared values (max abs diff {diff:.3g}, atol "
                f"{expected.atol}, rtol {expected.rtol})"
            )
    _check_bounds(expected, got)


def _check_bounds(expected: ExpectedOutput, got: np.ndarray) -> None:
    """Raise ClientError when a value of ``got`` (numbers) is outside ``min``/``max``, not one
    of ``values_in``, or out of ``order`` along the last axis."""
    name, values = expected.name, got.astype(np.float64)
    if expected.low is not None and values.size and values.min() < expected.low:
        raise ClientError(f"{name} has {values.min():.6g}, below the declared min {expected.low}")
    if expected.high is not None and values.size and values.max() > expected.high:
        raise ClientError(f"{name} has {values.max():.6g}, above the declared max {expected.high}")
    if expected.values_in is not None:
        stray = sorted(set(values.reshape(-1).tolist()) - set(expected.values_in))
        if stray:
            raise ClientError(f"{name} has {stray[:4]}, not among {list(expected.values_in)}")
    if expected.order is not None and values.ndim and values.shape[-1] > 1:
        steps = np.diff(values, axis=-1)
        wrong = steps > 0 if expected.order == "descending" else steps < 0
        if wrong.any():
            raise ClientError(f"{name} is not in {expected.order} order: {values.tolist()}")
