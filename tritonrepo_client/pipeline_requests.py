"""Requests and answers of any served model, without I/O: what
:class:`tritonrepo_client.PipelineClient` and its asyncio twin read from the model's metadata
and config, check and send.

A model's tensors come from Triton's model metadata (KServe v2 ``GET /v2/models/<m>``:
``inputs`` / ``outputs`` with ``name``, ``datatype`` and ``shape``, the batch dimension
included as -1) and its config (``GET /v2/models/<m>/config``: ``max_batch_size``, and which
inputs are ``optional``). Over gRPC the same messages come as protobuf JSON, where int64
fields (``shape``) are strings; both forms are read here.

Arrays are checked against them before anything is sent, so a mistake is named with the fix
instead of Triton's message after the round trip: an unknown or missing tensor name, a dtype
that cannot become the tensor's datatype, a shape that disagrees with its dims (-1 dims take
any size; with ``max_batch_size`` > 0 the first is the batch, 1..max_batch_size, equal across
the inputs).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tritonrepo_client.input_casts import cast_input
from tritonrepo_client.triton_messages import Kind, kinds_in
from tritonrepo_format.dtypes import NUMPY_TYPES

# KServe v2 datatypes → numpy dtypes of the arrays sent and received
# (:data:`tritonrepo_format.dtypes.NUMPY_TYPES`; BYTES are object arrays of
# ``bytes``). BF16 has no numpy dtype that tritonclient's request building maps back to BF16, so
# it is not in the table.
NUMPY_DTYPES: dict[str, Any] = dict(NUMPY_TYPES)


@dataclass(frozen=True)
class TensorSpec:
    """One input or output of a model.

    Attributes:
        name: the tensor's name.
        datatype: KServe v2 datatype (``"FP32"``, ``"INT64"``, ``"BYTES"``, ...).
        shape: the full shape of a request's tensor, the batch dimension included; -1 = any.
        batched: whether ``shape[0]`` is the batch dimension (the model's
            ``max_batch_size`` > 0).
        optional: an input the request may leave out (config ``optional: true``).
    """

    name: str
    datatype: str
    shape: tuple[int, ...]
    batched: bool = False
    optional: bool = False

    def describe(self, max_batch_size: int = 0) -> str:
        """``"TEXT BYTES [batch, 1]"``: name, datatype and dims; ``batch`` is the batch
        dimension (1..``max_batch_size``) and ``*`` a dim of any size."""
        dims = [
            "batch" if self.batched and i == 0 else "*" if d < 0 else str(d)
            for i, d in enumerate(self.shape)
        ]
        return f"{self.name} {self.datatype} [{', '.join(dims)}]"


@dataclass(frozen=True)
class ModelSignature:
    """The tensors of one model (version).

    Attributes:
        model: the model's name.
        version: the version they were read from ("" = the model's version policy).
        max_batch_size: 0 = no batch dimension; else the most batch items per request.
        inputs, outputs: in the order the model declares them.
    """

    model: str
    version: str
    max_batch_size: int
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    def input(self, name: str) -> TensorSpec | None:
        """The input called ``name``, or None."""
        return next((t for t in self.inputs if t.name == name), None)

    def output_names(self) -> list[str]:
        """The outputs' names, in the model's order."""
        return [t.name for t in self.outputs]

    def describe(self) -> str:
        """Lines: the model, its batch size, each tensor (:meth:`TensorSpec.describe`)."""
        batch = f"max_batch_size {self.max_batch_size}" if self.max_batch_size else "no batching"
        lines = [f"model {self.model!r} ({batch})"]
        for kind, tensors in (("input", self.inputs), ("output", self.outputs)):
            for t in tensors:
                extra = " (optional)" if t.optional else ""
                lines.append(f"  {kind} {t.describe(self.max_batch_size)}{extra}")
        return "\n".join(lines)


def _tensor_list(answer: Mapping[str, Any], key: str, model: str) -> list[Mapping[str, Any]]:
    tensors = answer.get(key, [])
    if not isinstance(tensors, list):
        raise ValueError(f"metadata of model {model!r}: {key!r} is not a list: {tensors!r}")
    return tensors


def signature_of(
    metadata: Mapping[str, Any], config: Mapping[str, Any], version: str = ""
) -> ModelSignature:
    """The :class:`ModelSignature` of a model from its metadata and config answers (dicts;
    HTTP JSON or gRPC protobuf JSON, where ``shape`` items are strings and a 0
    ``max_batch_size`` is left out).

    Raises:
        ValueError: an answer without tensor names or datatypes (not a model's metadata).
    """
    model = str(metadata.get("name", config.get("name", "")))
    max_batch_size = int(config.get("max_batch_size", 0))
    optional = {
        str(t.get("name")) for t in config.get("input", []) if t.get("optional", False) is True
    }

    def specs(key: str) -> tuple[TensorSpec, ...]:
        found = []
        for t in _tensor_list(metadata, key, model):
            if "name" not in t or "datatype" not in t:
                raise ValueError(f"metadata of model {model!r}: {key} entry without name: {t!r}")
            shape = tuple(int(d) for d in t.get("shape", []))
            name = str(t["name"])
            batched = max_batch_size > 0 and bool(shape) and shape[0] == -1
            opt = key == "inputs" and name in optional
            found.append(TensorSpec(name, str(t["datatype"]), shape, batched, opt))
        return tuple(found)

    return ModelSignature(model, version, max_batch_size, specs("inputs"), specs("outputs"))


def _unknown(kind: str, name: str, signature: ModelSignature, known: Sequence[TensorSpec]) -> str:
    names = [t.name for t in known]
    close = difflib.get_close_matches(name, names, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    listed = "; ".join(t.describe(signature.max_batch_size) for t in known) or "none"
    return f"model {signature.model!r} has no {kind} {name!r}: {hint}its {kind}s are: {listed}"


def _as_array(name: str, value: Any) -> np.ndarray:
    """``value`` as a numpy array (a ragged list named)."""
    if isinstance(value, np.ndarray):
        return value
    try:
        return np.asarray(value)
    except (ValueError, TypeError) as exc:
        raise ValueError(
            f"input {name}: not a rectangular array ({exc}); pass a nested list whose rows "
            "are all equally long, or a numpy array"
        ) from None


def _cast(spec: TensorSpec, array: np.ndarray) -> np.ndarray:
    """``array`` as the numpy dtype of ``spec.datatype``, when no value changes meaning
    (:mod:`tritonrepo_client.input_casts`).

    Raises:
        ValueError: a datatype without a numpy dtype (BF16), a dtype that cannot become it, or
            a value the cast would change; the message names the tensor, the value and the fix.
    """
    target = NUMPY_DTYPES.get(spec.datatype)
    if target is None:
        raise ValueError(
            f"input {spec.name} is {spec.datatype}, which this client cannot send (no numpy "
            "dtype maps to it in tritonclient); call tritonclient directly for it"
        )
    return cast_input(spec, array, target)


def _check_shape(spec: TensorSpec, array: np.ndarray, max_batch_size: int) -> None:
    expected = spec.describe(max_batch_size)
    got = list(array.shape)
    if array.ndim != len(spec.shape):
        batch = f"; the first dim is the batch (1..{max_batch_size})" if spec.batched else ""
        raise ValueError(
            f"input {spec.name}: expected {len(spec.shape)} dims ({expected}{batch}), got "
            f"shape {got} ({array.ndim} dims): reshape it, e.g. np.reshape(value, "
            f"{[d if d > 0 else -1 for d in spec.shape]})"
        )
    for axis, (want, size) in enumerate(zip(spec.shape, array.shape, strict=True)):
        if spec.batched and axis == 0:
            if not 1 <= size <= max_batch_size:
                raise ValueError(
                    f"input {spec.name}: batch of {size} items (dim 0 of shape {got}); the "
                    f"model takes 1 to {max_batch_size} per request: send at most "
                    f"{max_batch_size} per call"
                )
        elif want >= 0 and size != want:
            raise ValueError(
                f"input {spec.name}: dim {axis} must be {want}, got {size} (shape {got}; "
                f"expected {expected})"
            )


def prepare_inputs(signature: ModelSignature, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The arrays to send for ``inputs`` (``{name: array-like}``), checked against
    ``signature`` and cast to each input's datatype (BYTES: object arrays of ``bytes``).

    Raises:
        ValueError: ``inputs`` is not a mapping, names an input the model lacks or leaves out
            one it needs, a value is ragged, of a dtype that cannot become the input's
            datatype (:func:`_cast`), of the wrong rank or dims, a batch outside
            1..max_batch_size, or the inputs' batch sizes differ; the message names the
            tensor and the fix.
    """
    if not isinstance(inputs, Mapping):
        raise ValueError(
            f"infer() takes a mapping {{input name: array}}, got {type(inputs).__name__}; the "
            f"inputs of {signature.model!r}: {', '.join(t.name for t in signature.inputs)}"
        )
    for name in inputs:
        if signature.input(str(name)) is None:
            raise ValueError(_unknown("input", str(name), signature, signature.inputs))
    missing = [t for t in signature.inputs if t.name not in inputs and not t.optional]
    if missing:
        listed = "; ".join(t.describe(signature.max_batch_size) for t in missing)
        raise ValueError(f"model {signature.model!r} needs input(s) missing here: {listed}")
    prepared: dict[str, np.ndarray] = {}
    for name, value in inputs.items():
        spec = signature.input(str(name))
        assert spec is not None  # checked above
        array = _as_array(spec.name, value)
        if spec.datatype == "BYTES" and not isinstance(value, np.ndarray):
            # np.asarray turns numbers among strings into their printed form: keep the items.
            items = np.array(value, dtype=object)
            array = items if items.shape == array.shape else array
        array = _cast(spec, array)
        _check_shape(spec, array, signature.max_batch_size)
        prepared[spec.name] = array
    batches = {
        n: a.shape[0] for n, a in prepared.items() if (s := signature.input(n)) and s.batched
    }
    if len(set(batches.values())) > 1:
        listed = ", ".join(f"{n} has {b}" for n, b in batches.items())
        raise ValueError(
            f"the inputs of {signature.model!r} must have the same batch size (dim 0): {listed}"
        )
    return prepared


def requested_outputs(signature: ModelSignature, outputs: Sequence[str] | None) -> list[str]:
    """The output names to ask for: ``outputs`` checked, or all of the model's (None).

    Raises:
        ValueError: ``outputs`` is one string or empty, or names an output the model lacks.
    """
    if outputs is None:
        return signature.output_names()
    if isinstance(outputs, str | bytes):
        raise ValueError(
            f"outputs takes a list of output names, got one string {outputs!r}: pass [{outputs!r}]"
        )
    names = [str(o) for o in outputs]
    if not names:
        raise ValueError("outputs is empty: pass None for all outputs, or a list of names")
    known = signature.output_names()
    for name in names:
        if name not in known:
            raise ValueError(_unknown("output", name, signature, signature.outputs))
    return list(dict.fromkeys(names))


def metadata_arguments(protocol: str, deadline_s: float) -> dict[str, Any]:
    """Keyword arguments of tritonclient's ``get_model_metadata`` / ``get_model_config`` that
    make both protocols answer JSON dicts, with the gRPC deadline in seconds (HTTP calls are
    bounded by the connection)."""
    return {} if protocol == "http" else {"as_json": True, "client_timeout": deadline_s}


def version_text(model_version: str | int | None) -> str:
    """``model_version`` as Triton takes it: "" for None (the model's version policy).

    Raises:
        ValueError: not a str, an int >= 1 or None, or a str that is not a version number.
    """
    if model_version is None:
        return ""
    if isinstance(model_version, bool) or not isinstance(model_version, str | int):
        raise ValueError(
            f"model_version is a version number (str or int), got {type(model_version).__name__}"
        )
    text = str(model_version).strip()
    if text and not (text.isdigit() and int(text) >= 1):
        raise ValueError(f"model_version must be a version number >= 1, got {model_version!r}")
    return text


def names_version_not_loaded(exc: BaseException) -> bool:
    """Whether a metadata or config error says that the version asked for is not loaded
    (Triton's NOT_FOUND / NOT_READY texts: :mod:`tritonrepo_client.triton_messages`)."""
    return bool(kinds_in(str(exc)) & {Kind.NOT_FOUND, Kind.NOT_READY})


def config_of(answer: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ModelConfig dict of a ``get_model_config`` answer (gRPC wraps it in
    ``{"config": ...}``)."""
    return answer.get("config", answer)


__all__ = [
    "NUMPY_DTYPES",
    "ModelSignature",
    "TensorSpec",
    "config_of",
    "metadata_arguments",
    "names_version_not_loaded",
    "prepare_inputs",
    "requested_outputs",
    "signature_of",
    "version_text",
]
