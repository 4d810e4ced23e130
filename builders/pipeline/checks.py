"""The checks of a description against its ONNX graph, its functions and the repository, run
by the generator before it writes anything (:func:`check`).

Each problem names the description's field and the fix, e.g.::

    pipelines/x/pipeline.toml: preprocess.function: output 'features' is float64, the core
    model's input 'features' is FP32; cast it in preprocess (astype(np.float32))
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from builders.pipeline.graph import GraphIO, ModelSourceError, graph_io, obtain_model
from builders.pipeline.render import CoreTensor
from tritonrepo.pipelines.description import (
    DTYPES,
    DescriptionError,
    Pipeline,
    Tensor,
    import_ref,
)

PROBE_LIMIT_BYTES = 64 * 1024  # the health probe's JSON in the ensemble config, at most


@dataclass(frozen=True)
class Checked:
    """What the checks established: the core model's tensors as the configs declare them, the
    probe JSON (None without samples) and the ONNX model (None for a ``builder`` core)."""

    core_inputs: tuple[CoreTensor, ...]
    core_outputs: tuple[CoreTensor, ...]
    probe: str | None
    model: Any
    tensorrt: bool = True  # False: the graph has operators TensorRT cannot parse (ai.onnx.ml)


def _numpy_kind(dtype: str) -> str:
    return DTYPES[dtype]


def _core_tensors(pipeline: Pipeline, io: GraphIO | None, problems: list[str]):
    """Core tensors from the graph (fixed dims applied), or the declared ones."""
    core = pipeline.core
    if io is None:
        return (
            tuple(CoreTensor(t.name, t.dtype, t.dims) for t in core.inputs),
            tuple(CoreTensor(t.name, t.dtype, t.dims) for t in core.outputs),
        )
    names = {t.name for t in io.inputs}
    for key in core.fixed_dims:
        if key not in names:
            problems.append(
                f"model.fixed_dims.{key}: the graph has no input '{key}'; inputs: {sorted(names)}"
            )

    def convert(t, is_input: bool) -> CoreTensor:
        if len(t.shape) == 1:
            return CoreTensor(t.name, t.dtype, (1,), reshape=True)
        dims = tuple(-1 if d is None else d for d in t.shape[1:])
        fixed = core.fixed_dims.get(t.name) if is_input else None
        if fixed is not None:
            if len(fixed) != len(dims) or any(
                d not in (-1, f) for d, f in zip(dims, fixed, strict=False)
            ):
                problems.append(
                    f"model.fixed_dims.{t.name}: {list(fixed)} does not fit the graph's dims "
                    f"{list(dims)} (batch dim excluded); give {len(dims)} sizes"
                )
            else:
                dims = tuple(fixed)
        if is_input and -1 in dims and not core.same_shape_batches:
            problems.append(
                f"model: graph input '{t.name}' has dynamic dims {list(dims)} besides the batch "
                "dim, and Triton's dynamic batcher joins only requests of one shape unless the "
                "model takes ragged batches (ONNX Runtime and TensorRT plans do not); fix them "
                f"with fixed_dims = {{ {t.name} = [...] }} (and pad to them in preprocess), or "
                "set same_shape_batches = true to batch only requests of equal shapes"
            )
        return CoreTensor(t.name, t.dtype, dims)

    return (
        tuple(convert(t, True) for t in io.inputs),
        tuple(convert(t, False) for t in io.outputs),
    )


def _import(ref: str | None, field: str, problems: list[str]) -> Any:
    if ref is None:
        return None
    try:
        return import_ref(ref)
    except Exception as exc:
        problems.append(
            f"{field}: cannot import {ref!r}: {exc}; the module must be importable from the "
            "checkout root (pipelines/<name>/<module>.py with __init__.py files)"
        )
        return None


def _compare(got: Mapping[str, Any], want: tuple[Tensor, ...], field: str,
             what: str, problems: list[str], neither: str | None) -> None:  # fmt: skip
    """``got`` (a function's result) against the tensors it must contain; a missing one is
    reported as in neither ``neither`` (a declared tensor nothing makes), or, when None, as
    ``what`` the function does not return (a graph tensor)."""
    for t in want:
        if t.name not in got:
            missing = (
                f"tensor '{t.name}' ({what}) exists in neither {neither}"
                if neither
                else f"does not return '{t.name}', {what}"
            )
            problems.append(f"{field}: {missing}; return it from the function (got {sorted(got)})")
            continue
        value = np.asarray(got[t.name])
        expected = np.dtype(_numpy_kind(t.dtype))
        if expected.kind == "O":
            ok = value.dtype == object or value.dtype.kind in "SU"
        else:
            ok = value.dtype == expected
        if not ok:
            problems.append(
                f"{field}: dtype mismatch: '{t.name}' is {value.dtype}, {what} is {t.dtype}; "
                f"cast it in the function (astype(np.{expected.name}))"
            )
        if value.ndim != len(t.dims) + 1 or any(
            d != -1 and d != s for d, s in zip(t.dims, value.shape[1:], strict=False)
        ):
            problems.append(
                f"{field}: '{t.name}' has shape {list(value.shape)}, {what} is [batch, "
                f"{', '.join(str(d) for d in t.dims)}] (-1 = any); return it batch-first"
            )


def probe_json(pipeline: Pipeline, samples: Mapping[str, np.ndarray]) -> str:
    """The health probe: the sample row whose request is smallest, as KServe v2 JSON input
    tensors (BYTES items as UTF-8 strings, or ``{"b64": ...}`` for binary data), every
    response tensor named (each must come back; numbers finite)."""
    rows = len(next(iter(samples.values())))

    def size(i: int) -> int:
        return sum(
            np.asarray(v[i : i + 1]).nbytes
            + sum(len(x) for x in np.ravel(v[i]) if isinstance(x, bytes))
            for v in samples.values()
        )

    row = min(range(rows), key=size)
    inputs = []
    for t in pipeline.inputs:
        if t.name not in samples:
            continue
        value = np.asarray(samples[t.name][row : row + 1])
        if t.dtype == "BYTES":
            data: list[Any] = []
            for item in value.ravel():
                raw = item if isinstance(item, bytes) else str(item).encode()
                try:
                    data.append(raw.decode("utf-8"))
                except UnicodeDecodeError:
                    data.append({"b64": base64.b64encode(raw).decode()})
        elif value.dtype.kind == "f":  # the shortest text that reads back as the same value
            data = [float(str(v)) for v in value.ravel()]
        else:
            data = value.ravel().tolist()
        inputs.append(
            {"name": t.name, "datatype": t.dtype, "shape": list(value.shape), "data": data}
        )
    outputs = [{"name": t.name} for t in pipeline.outputs]
    return json.dumps({"inputs": inputs, "outputs": outputs}, separators=(",", ":"))


def check(pipeline: Pipeline, repository: Path, owned: set[str], force: bool = False) -> Checked:
    """Every check of the module docstring, in one pass.

    Args:
        pipeline: the description (:func:`tritonrepo.pipelines.description.load`).
        repository: the model repository the models go into.
        owned: model folders this description already generated (a clash with them is fine).
        force: allow a clash with any existing model folder.

    Raises:
        DescriptionError: every problem found, nothing written.
    """
    problems: list[str] = []
    for field, model in zip(("name", "preprocess.model", "model.model", "postprocess.model"),
                            pipeline.models, strict=False):  # fmt: skip
        if (repository / model).exists() and model not in owned and not force:
            problems.append(
                f"{field}: '{model}' clashes with an existing model in {repository.name}/; pick "
                "another name (or --force to replace it)"
            )
    pre = _import(
        pipeline.preprocess.ref,
        f"preprocess.{'function' if pipeline.preprocess.function else 'step'}",
        problems,
    )
    post = _import(
        pipeline.postprocess.ref,
        f"postprocess.{'function' if pipeline.postprocess.function else 'step'}",
        problems,
    )
    make_samples = _import(pipeline.samples, "samples.function", problems)
    _import(pipeline.core.build, "model.build", problems)
    model, io = None, None
    if pipeline.core.builder is None and not problems:
        try:
            model = obtain_model(pipeline)
            io = graph_io(model)
        except ModelSourceError as exc:
            problems.append(str(exc))
    core_inputs, core_outputs = _core_tensors(pipeline, io, problems)
    probe = None
    if make_samples is not None and not problems:
        probe = _run_samples(
            pipeline, make_samples, pre, post, model, core_inputs, core_outputs, problems
        )
    if problems:
        raise DescriptionError(pipeline.source, problems)
    return Checked(core_inputs, core_outputs, probe, model, model is None or tensorrt_parses(model))


def tensorrt_parses(model: Any) -> bool:
    """False when the graph uses an operator domain TensorRT's ONNX parser has no kernels for
    (``ai.onnx.ml``: scikit-learn's Scaler, LinearClassifier, TreeEnsemble...)."""
    return not any(node.domain == "ai.onnx.ml" for node in model.graph.node)


def _run_samples(pipeline, make_samples, pre, post, model, core_inputs, core_outputs, problems):
    """Samples → preprocess → core (ONNX Runtime) → postprocess, checking each hand-over."""
    try:
        samples = make_samples()
    except Exception as exc:
        problems.append(f"samples.function: {pipeline.samples}() failed: {exc!r}")
        return None
    if not isinstance(samples, dict):
        problems.append("samples.function: must return {input name: batch-first array}")
        return None
    _compare(samples, tuple(t for t in pipeline.inputs if not t.optional or t.name in samples),
             "samples.function", "the request tensor", problems, "the samples")  # fmt: skip
    if problems:
        return None
    probe = probe_json(pipeline, samples)
    if len(probe) > PROBE_LIMIT_BYTES:
        problems.append(
            f"samples.function: the smallest sample request is {len(probe)} bytes as JSON, over "
            f"{PROBE_LIMIT_BYTES} for the health probe in the config; add a smaller sample"
        )
    if pipeline.preprocess.function is None or pipeline.postprocess.function is None:
        return probe
    try:
        pre_out = pre(dict(samples))
    except Exception as exc:
        problems.append(
            f"preprocess.function: {pipeline.preprocess.function} failed on the samples: {exc!r}"
        )
        return probe
    want = (*[c.as_tensor() for c in core_inputs], *pipeline.preprocess.outputs)
    neither = "the ONNX graph's inputs nor preprocess's outputs"
    graph_inputs = tuple(c.as_tensor() for c in core_inputs)
    _compare(pre_out, graph_inputs, "preprocess.function",
             "the core model's input", problems, None)  # fmt: skip
    _compare(pre_out, pipeline.preprocess.outputs, "preprocess.function",
             "declared in preprocess.outputs", problems, neither)  # fmt: skip
    extra = sorted(set(pre_out) - {t.name for t in want})
    if extra:
        problems.append(
            f"preprocess.function: returns {extra}, which the core model does not take; "
            "declare them under preprocess.outputs for postprocess, or drop them"
        )
    if problems or model is None:
        return probe
    import onnxruntime as ort

    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {c.name: np.asarray(pre_out[c.name]).reshape(-1) if c.reshape else pre_out[c.name]
             for c in core_inputs}  # fmt: skip
    results = session.run([c.name for c in core_outputs], feeds)
    post_in = {
        c.name: r.reshape(-1, 1) if c.reshape else r
        for c, r in zip(core_outputs, results, strict=False)
    }
    post_in.update({t.name: pre_out[t.name] for t in pipeline.preprocess.outputs})
    try:
        post_out = post(post_in)
    except Exception as exc:
        problems.append(
            f"postprocess.function: {pipeline.postprocess.function} failed on the samples: {exc!r}"
        )
        return probe
    _compare(post_out, pipeline.outputs, "postprocess.function", "the response tensor", problems,
             "the ONNX graph's outputs nor postprocess's outputs")  # fmt: skip
    return probe
