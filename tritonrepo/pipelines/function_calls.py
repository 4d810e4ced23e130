"""Calling a pipeline description's ``module:function`` on a dynamic batch (pure logic, no
``triton_python_backend_utils``): :mod:`tritonrepo.pipelines.function_step` is the thin
Python-backend step around it.

The user's function takes and returns plain numpy, batch-first::

    fn(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]   # every array [b, ...]

:func:`call_batch` runs it once per group of requests whose tensors can be joined along axis 0
(same names, same trailing shapes, same dtypes), splits the results back by each request's own
batch size, checks every result against the config's declared outputs (:class:`OutputSpec`) and
turns every failure into that request's error, so that one bad request never fails the others
of the batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

import numpy as np

from tritonrepo.step.dtypes import NUMPY_DTYPES
from tritonrepo.step.errors import InvalidRequest

Tensors = dict[str, np.ndarray]
UserFunction = Callable[[Tensors], Any]

# Triton config data types -> numpy (the stub side's one table).
TRITON_DTYPES: Mapping[str, Any] = NUMPY_DTYPES


class OutputCheckError(RuntimeError):
    """A result of the user's function does not fit the declared outputs (a bug in the function,
    not in the request: answered as an internal error); the message names the function, the
    output and what was expected and got."""


class OutputSpec(NamedTuple):
    """One declared output of a step.

    Attributes:
        dtype: its numpy dtype (``np.float32`` ...); ``object`` (``np.object_``) for BYTES.
        dims: its shape without the batch dim; ``-1`` matches any size.
    """

    dtype: Any
    dims: tuple[int, ...]


def output_specs(
    config_outputs: Iterable[Mapping[str, Any]], max_batch_size: int = 1
) -> dict[str, OutputSpec]:
    """The :class:`OutputSpec` of every output of a model config (``model_config["output"]``).

    Args:
        config_outputs: dicts with ``name``, ``data_type`` (``"TYPE_FP32"`` ...) and ``dims``
            (ints or the strings of Triton's JSON config).
        max_batch_size: the config's; with ``0`` the first declared dim is the batch dim and is
            dropped (the functions are batch-first either way).

    Raises:
        ValueError: a data type has no numpy equivalent (``TYPE_BF16``), or a ``max_batch_size``
            0 output has no dims; the message names the output.
    """
    specs = {}
    for out in config_outputs:
        name, data_type = out["name"], out["data_type"]
        if data_type not in TRITON_DTYPES:
            known = ", ".join(TRITON_DTYPES)
            raise ValueError(f"output '{name}': data type {data_type} is not supported ({known})")
        dims = tuple(int(d) for d in out.get("dims", ()))
        if max_batch_size == 0:
            if not dims:
                raise ValueError(f"output '{name}': max_batch_size 0 needs a batch dim in dims")
            dims = dims[1:]
        specs[name] = OutputSpec(np.dtype(TRITON_DTYPES[data_type]), dims)
    return specs


def function_ref(fn: Callable) -> str:
    """``"module:qualname"`` of a callable (the name used in error messages)."""
    module = getattr(fn, "__module__", None) or "?"
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    return f"{module}:{name}"


def call_batch(
    fn: UserFunction,
    items: list[Tensors],
    outputs: Mapping[str, OutputSpec],
    ref: str | None = None,
) -> list[Tensors | Exception]:
    """Run ``fn`` on the requests of a dynamic batch; one result or error per request.

    Args:
        fn: the user's function, ``dict[str, ndarray] -> dict[str, ndarray]``, batch-first.
        items: one dict per request, ``{input name: array [b_i, ...]}``; ``b_i`` (axis 0) is
            the request's own batch size, the same for all of its tensors. BYTES inputs are
            object arrays of ``bytes``.
        outputs: the declared outputs, ``{name: OutputSpec}``.
        ref: the function's name in messages (default ``module:qualname`` of ``fn``).

    Requests whose tensors have the same names, trailing shapes and dtypes are joined along
    axis 0 and ``fn`` runs once for the whole group; its results are split back by the
    ``b_i``. When the joint call raises or its results fail the checks, ``fn`` runs again on
    each request of the group alone, so only a bad request fails.

    Returns:
        One entry per item, in order: ``{output name: array [b_i, *dims]}`` with every declared
        output cast to its dtype (BYTES: object array of ``bytes``, ``str`` encoded UTF-8), or
        the request's error:

        - :class:`~tritonrepo.step.errors.InvalidRequest`: the request's tensors disagree on
          the batch size or are 0-d, or ``fn`` raised a ``ValueError`` (its message is kept;
          an ``InvalidRequest`` raised by ``fn`` is passed on as is).
        - :class:`OutputCheckError` (a ``RuntimeError``): a result is not a dict, a declared
          output is missing or an undeclared one is returned, a value is not an ``ndarray``,
          its first dim is not ``b_i``, its trailing dims differ from the declared ones, or its
          dtype cannot be cast (numeric: ``np.can_cast(got, declared, "same_kind")``; BYTES:
          object arrays of bytes/str, or ``S``/``U`` arrays).
        - ``RuntimeError("internal error in <ref>: <repr>")``: ``fn`` raised anything else,
          ``SystemExit`` included (a ``sys.exit()`` left in a function must not end the
          stub's ``execute`` and every request of the batch with it).

    Nothing is raised out of this function (``Exception`` and ``SystemExit``).
    """
    name = ref or function_ref(fn)
    results: list[Tensors | Exception | None] = [None] * len(items)
    groups: dict[tuple, list[int]] = {}
    sizes: list[int | None] = [None] * len(items)
    for i, item in enumerate(items):
        try:
            sizes[i] = _batch_size(item)
            groups.setdefault(_signature(item), []).append(i)
        except Exception as exc:
            results[i] = as_request_error(exc, name)
    for members in groups.values():
        if len(members) > 1:
            joint = _joint(fn, [items[i] for i in members], [sizes[i] for i in members], outputs)
            if joint is not None:
                for i, result in zip(members, joint, strict=True):
                    results[i] = result
                continue
        for i in members:
            results[i] = _call_one(fn, items[i], sizes[i], outputs, name)
    return results  # type: ignore[return-value]


def _batch_size(item: Mapping[str, Any]) -> int | None:
    """The request's batch size (axis 0, equal across its tensors); None without tensors.

    Raises:
        InvalidRequest: a tensor is not an array of at least one dim, or the sizes differ.
    """
    found: dict[str, int] = {}
    for key, value in item.items():
        if not isinstance(value, np.ndarray) or value.ndim == 0:
            raise InvalidRequest(f"input '{key}' must be batch-first (at least one dim)")
        found[key] = value.shape[0]
    if len(set(found.values())) > 1:
        listed = ", ".join(f"'{k}' has {n}" for k, n in found.items())
        raise InvalidRequest(f"the inputs disagree on the batch size: {listed}")
    return next(iter(found.values()), None)


def _signature(item: Mapping[str, np.ndarray]) -> tuple:
    """What must agree for requests to be joined; an item without tensors is its own group."""
    if not item:
        return ("empty", id(item))
    return tuple(sorted((key, value.shape[1:], value.dtype.str) for key, value in item.items()))


def _joint(
    fn: UserFunction,
    group: list[Tensors],
    sizes: list[int | None],
    outputs: Mapping[str, OutputSpec],
) -> list[Tensors] | None:
    """``fn`` once on the joined group, split back by ``sizes``; None when the call raises or
    its results fail the checks (then each request is called alone)."""
    try:
        joined = {key: np.concatenate([item[key] for item in group]) for key in group[0]}
        total = sum(int(s) for s in sizes if s is not None)
        checked = check_outputs(fn(joined), total, outputs, "")
    except (Exception, SystemExit):
        return None
    cuts = np.cumsum([int(s) for s in sizes if s is not None])[:-1]
    parts = {key: np.split(value, cuts) for key, value in checked.items()}
    return [{key: parts[key][j] for key in parts} for j in range(len(group))]


def _call_one(
    fn: UserFunction,
    item: Tensors,
    size: int | None,
    outputs: Mapping[str, OutputSpec],
    name: str,
) -> Tensors | Exception:
    try:
        result = fn(dict(item))
    except (Exception, SystemExit) as exc:  # sys.exit() in a step ends only this request
        return as_request_error(exc, name)
    try:
        return check_outputs(result, size, outputs, name)
    except OutputCheckError as exc:
        return exc
    except Exception as exc:  # a bug in the checks must not escape either
        return RuntimeError(f"internal error checking the results of {name}: {exc!r}")


def as_request_error(exc: BaseException, name: str) -> Exception:
    """A ``ValueError`` is the request's fault (InvalidRequest); anything else is internal."""
    if isinstance(exc, InvalidRequest):
        return exc
    if isinstance(exc, ValueError):
        message = str(exc) or f"{name} rejected the request (ValueError without a message)"
        error = InvalidRequest(message)
        error.__cause__ = exc
        return error
    error = RuntimeError(f"internal error in {name}: {exc!r}")
    error.__cause__ = exc
    return error


def check_outputs(
    result: Any, size: int | None, outputs: Mapping[str, OutputSpec], name: str
) -> Tensors:
    """``result`` checked against ``outputs`` and cast to their dtypes.

    Args:
        size: the expected first dim; None (a request without tensors): the outputs must agree
            among themselves.

    Raises:
        OutputCheckError: the first problem found, naming ``name`` and the output.
    """
    if not isinstance(result, Mapping):
        raise OutputCheckError(
            f"{name} returned a {type(result).__name__}; it must return a dict of output name "
            f"-> numpy array (outputs: {', '.join(outputs)})"
        )
    missing = [key for key in outputs if key not in result]
    extra = [str(key) for key in result if key not in outputs]
    if missing or extra:
        problems = []
        if missing:
            problems.append(f"missing output(s) {', '.join(map(repr, missing))}")
        if extra:
            problems.append(f"undeclared output(s) {', '.join(map(repr, extra))}")
        raise OutputCheckError(
            f"{name} returned {'; '.join(problems)}; the declared outputs are "
            f"{', '.join(map(repr, outputs))}"
        )
    checked: Tensors = {}
    for key, spec in outputs.items():
        value = result[key]
        if not isinstance(value, np.ndarray):
            raise OutputCheckError(
                f"{name}: output '{key}' is a {type(value).__name__}, not a numpy array; "
                "return np.ndarray values (e.g. np.asarray(..., dtype=...))"
            )
        if size is None and value.ndim >= 1:
            size = value.shape[0]
        expected = f"[{', '.join(map(str, (size, *spec.dims)))}]"
        trailing_ok = value.ndim == 1 + len(spec.dims) and all(
            want in (-1, got) for want, got in zip(spec.dims, value.shape[1:], strict=True)
        )
        if value.ndim == 0 or value.shape[0] != size or not trailing_ok:
            raise OutputCheckError(
                f"{name}: output '{key}' has shape {list(value.shape)}, expected {expected} "
                f"(batch {size}, declared dims {list(spec.dims)}, -1 = any)"
            )
        checked[key] = _cast(value, np.dtype(spec.dtype), key, name)
    return checked


def _cast(value: np.ndarray, dtype: np.dtype, key: str, name: str) -> np.ndarray:
    if dtype == np.dtype(object):
        return _as_bytes(value, key, name)
    if value.dtype.kind not in "biuf" or not np.can_cast(value.dtype, dtype, "same_kind"):
        raise OutputCheckError(
            f"{name}: output '{key}' has dtype {value.dtype}, expected {dtype} (or a numeric "
            f"dtype castable to it with same_kind casting)"
        )
    return value.astype(dtype, copy=False)


def _as_bytes(value: np.ndarray, key: str, name: str) -> np.ndarray:
    """A BYTES output as an object array of ``bytes`` (``str`` encoded UTF-8)."""
    if value.dtype.kind not in "OSU":
        raise OutputCheckError(
            f"{name}: output '{key}' has dtype {value.dtype}, expected BYTES (an object array "
            "of bytes or str, or a numpy S/U string array)"
        )
    out = np.empty(value.shape, dtype=object)
    flat = out.reshape(-1)
    for j, element in enumerate(value.reshape(-1)):
        if isinstance(element, (bytes, np.bytes_)):
            flat[j] = bytes(element)
        elif isinstance(element, str):
            flat[j] = element.encode("utf-8")
        elif isinstance(element, (bytearray, memoryview)):
            flat[j] = bytes(element)
        else:
            index = np.unravel_index(j, value.shape)
            raise OutputCheckError(
                f"{name}: output '{key}' element {list(map(int, index))} is a "
                f"{type(element).__name__}, expected bytes or str (BYTES output)"
            )
    return out
