"""Casting a request's arrays to the datatypes of a model's inputs, only when no value changes
meaning (used by :func:`tritonrepo_client.pipeline_requests.prepare_inputs`).

The rule, per target datatype (``NUMPY_DTYPES`` of :mod:`tritonrepo_client.pipeline_requests`):

- ``BYTES``: text (``str``, encoded as UTF-8) or ``bytes`` items only.
- ``BOOL``: boolean arrays only (``0``/``1`` are refused: pass ``true``/``false``).
- integer types: integers whose values the type's range holds, and floats whose values are
  whole numbers within that range (``2.0`` becomes ``2``); a fraction (``1.5``), NaN or an
  infinity is refused.
- float types: integers and floats; each value becomes the nearest value of the type (IEEE 754
  round to nearest, as numpy's ``astype``: digits beyond the type's precision go, a value too
  small for it becomes 0). A finite value beyond the type's largest (``1e40`` for ``FP32``,
  whose largest is about 3.4e38; ``70000`` for ``FP16``, whose largest is 65504) would become
  an infinity and is refused. NaN and infinities given as such are sent as they are.

Every refusal is a ``ValueError`` naming the input, its datatype, the first value that does
not fit with its index, and the fix; nothing is sent.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np


class InputSpec(Protocol):
    """What a cast needs of an input: its name and KServe v2 datatype."""

    name: str
    datatype: str


def _first(array: np.ndarray, bad: np.ndarray) -> str:
    """``"1e+40 at index [0, 3]"``: the first flagged value of ``array`` and its index
    (``bad``: a bool array of the same shape, at least one True); ``(n more)`` when more are."""
    index = tuple(int(i) for i in np.argwhere(bad)[0])
    value = array[index].item() if array.ndim else array.item()
    count = int(np.count_nonzero(bad))
    more = f" ({count - 1} more)" if count > 1 else ""
    return f"{value!r} at index {list(index)}{more}"


def as_bytes(spec: InputSpec, array: np.ndarray) -> np.ndarray:
    """A BYTES input as an object array of ``bytes`` (``str`` items encoded as UTF-8).

    Raises:
        ValueError: the array is numeric, or an item is neither ``str`` nor ``bytes``.
    """
    if array.dtype.kind not in "USO":
        raise ValueError(
            f"input {spec.name} is BYTES (text or raw bytes), got a {array.dtype} array: pass "
            'str items, e.g. [["hello"]], or bytes items, e.g. [[open("photo.jpg", "rb").read()]] '
            "(a file's encoded bytes, not its decoded pixels)"
        )
    out = np.empty(array.shape, dtype=object)
    flat_in, flat_out = array.reshape(-1), out.reshape(-1)
    for i, item in enumerate(flat_in):
        if isinstance(item, str):
            flat_out[i] = item.encode("utf-8")
        elif isinstance(item, bytes | bytearray | memoryview):
            flat_out[i] = bytes(item)
        else:
            raise ValueError(
                f"input {spec.name} is BYTES: item {i} (flat index) is "
                f"{type(item).__name__} {item!r:.40}, not str or bytes; pass str(value) if you "
                "mean its printed form"
            )
    return out


def _to_integers(wanted: str, array: np.ndarray, target: np.dtype) -> np.ndarray:
    """Integers or whole floats into the integer dtype ``target`` (range checked)."""
    info = np.iinfo(target)
    if array.dtype.kind == "f":
        not_finite = ~np.isfinite(array)
        if not_finite.any():
            raise ValueError(
                f"{wanted}: value {_first(array, not_finite)} is not a number it can hold; "
                "pass integers"
            )
        fraction = array != np.floor(array)
        if fraction.any():
            raise ValueError(
                f"{wanted}: value {_first(array, fraction)} has a fraction; pass integers "
                f"(np.round(array).astype({target}) if the fractions may go)"
            )
        # Compared as float64 (which holds every float16/32/64 value exactly) with the bounds
        # as floats: info.max + 1 is a power of two, exact, where float(info.max) may round up.
        wide = array.astype(np.float64)
        outside = (wide < float(info.min)) | (wide >= float(info.max + 1))
    else:
        # Compared in the source's own dtype, the bounds clipped to its range: mixing int64
        # and uint64 would compare as float64, which cannot tell 2**63 - 1 from 2**63.
        own = np.iinfo(array.dtype)
        low = np.array(max(info.min, own.min), dtype=array.dtype)
        high = np.array(min(info.max, own.max), dtype=array.dtype)
        outside = (array < low) | (array > high)
    if outside.any():
        raise ValueError(
            f"{wanted}: value {_first(array, outside)} is outside its range "
            f"{info.min}..{info.max}; pass values in that range, or declare a wider integer type"
        )
    return array.astype(target)


def _to_floats(wanted: str, array: np.ndarray, target: np.dtype) -> np.ndarray:
    """Integers or floats into the float dtype ``target``: refused where a finite value would
    become an infinity (beyond the type's largest value, after rounding)."""
    with np.errstate(over="ignore", invalid="ignore"):
        cast = array.astype(target)
    overflow = np.isinf(cast) & np.isfinite(array)  # integers are all finite
    if overflow.any():
        largest = np.finfo(target).max.item()
        raise ValueError(
            f"{wanted}: value {_first(array, overflow)} is beyond its largest value "
            f"{largest:.8g} and would become inf; scale it into range, or pass inf itself if "
            "an infinity is meant"
        )
    return cast


def cast_input(spec: InputSpec, array: np.ndarray, target: Any) -> np.ndarray:
    """``array`` as numpy dtype ``target`` (the dtype of ``spec.datatype``; ``np.object_`` for
    BYTES), when no value changes meaning (the module's rule).

    Raises:
        ValueError: a dtype that cannot become ``target`` (text for numbers, numbers for text
            or BOOL, bools for numbers), or a value that would change (a fraction, NaN or an
            infinity into an integer type; an integer out of its range; a finite float that
            would overflow to inf); the message names the input, the value and the fix.
    """
    if spec.datatype == "BYTES":
        return as_bytes(spec, array)
    target = np.dtype(target)
    source = array.dtype
    wanted = f"input {spec.name} is {spec.datatype} ({target})"
    if source == target:
        return array
    if target.kind == "b":
        raise ValueError(f"{wanted}, got {source}: pass true/false values (a bool array)")
    if source.kind not in "biuf":
        raise ValueError(f"{wanted}, got {source} values: pass numbers, not text or objects")
    if source.kind == "b":
        raise ValueError(f"{wanted}, got bool: pass numbers (array.astype({target}))")
    if target.kind in "iu":
        return _to_integers(wanted, array, target)
    return _to_floats(wanted, array, target)


__all__ = ["InputSpec", "as_bytes", "cast_input"]
