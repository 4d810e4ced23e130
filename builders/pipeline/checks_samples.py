"""The generator's run of a description's samples through its functions and core model in one
process, each hand-over checked (:func:`_run_samples`), and the health probe made from the
samples (:func:`probe_json`). The problems read like those of :mod:`builders.pipeline.checks`,
each naming the field and the fix."""

from __future__ import annotations

import base64
import json
import traceback
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from builders.pipeline import batch_dims
from builders.pipeline.graph import GraphIO, graph_io
from builders.pipeline.in_process import InProcess
from tritonrepo.description import DTYPES, Pipeline, Tensor
from tritonrepo.paths import REPO_ROOT

MIN_SAMPLE_ROWS = 8  # batch parity needs a batch; INT8 calibration and the tests use them too
PROBE_LIMIT_BYTES = 64 * 1024  # the health probe's JSON in the ensemble config, at most


def _numpy_kind(dtype: str) -> str:
    return DTYPES[dtype]


def _where(exc: BaseException) -> str:
    """``file:line`` of the innermost frame of ``exc``'s traceback, or ''."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    frame = frames[-1]
    path = Path(frame.filename)
    shown = path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path
    return f" at {shown}:{frame.lineno}"


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
            dims = ", ".join(str(d) for d in t.dims)
            fix = "return it batch-first"
            if value.ndim == len(t.dims) and t.dims == (1,):
                fix = f"return it as [batch, 1]: {t.name}.reshape(-1, 1)"
            problems.append(
                f"{field}: '{t.name}' has shape {list(value.shape)}, {what} is [batch, "
                f"{dims}] (-1 = any); {fix}"
            )


def quiet_session_options() -> Any:
    """``onnxruntime.SessionOptions`` that log errors only (``log_severity_level`` 3).

    ONNX Runtime's warnings (such as ``VerifyOutputSizes``: an output whose shape differs
    from the one the graph declares) would print among the generator's lines without saying
    which field to fix; :func:`_check_declared_outputs` reports that mismatch itself, naming
    the output and the fix, and errors still print.
    """
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    return options


def _check_declared_outputs(io: GraphIO, names: list[str], results: list[np.ndarray],
                            problems: list[str]) -> None:  # fmt: skip
    """Each output the graph produced on the samples against the shape the graph declares
    (the configs are made from the declared one): rank, and every fixed dim."""
    declared = {t.name: t.shape for t in io.outputs}
    for name, value in zip(names, results, strict=True):
        shape = declared.get(name)
        got = np.asarray(value).shape
        if shape is None or (
            len(shape) == len(got)
            and all(d is None or d == g for d, g in zip(shape, got, strict=True))
        ):
            continue
        shown = ", ".join("N" if d is None else str(d) for d in shape)
        problems.append(
            f"model: the core model's output '{name}' has shape {list(got)} on the samples, but "
            f"the graph declares [{shown}] (N = any); the configs are made from the declared "
            "shape: fix the graph's output shape (or the model)"
        )


def _check_core_outputs(model: Any, feeds: Mapping[str, np.ndarray], names: list[str],
                        results: list[np.ndarray], problems: list[str],
                        who: str) -> None:  # fmt: skip
    """The core model's outputs on the samples against its declared shapes: first, an output
    whose fixed first dim the samples prove is the batch gets the graph's dynamic batch dim
    (``model``, an ``onnx.ModelProto``, is edited in place; one line on stdout names it,
    prefixed with ``who``: :mod:`builders.pipeline.batch_dims`); then every other mismatch is a
    problem (:func:`_check_declared_outputs`). ``feeds`` are the inputs ``results`` came from."""
    rows = batch_dims.batch_rows(feeds)
    freed = batch_dims.free_fixed_batch_dims(model, names, results, rows)
    if freed:
        print(batch_dims.note(who, freed, rows))
    _check_declared_outputs(graph_io(model), names, results, problems)


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
        if pipeline.max_batch_size == 0:  # row = one request, without a batch dim
            value = value[0]
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


def _run_samples(pipeline, make_samples, pre, post, model, core_inputs, core_outputs, problems):
    """Samples → preprocess → core (ONNX Runtime) → postprocess, checking each hand-over."""
    try:
        samples = make_samples()
    except Exception as exc:
        problems.append(f"samples.function: {pipeline.samples}() failed{_where(exc)}: {exc!r}")
        return None
    if not isinstance(samples, dict):
        problems.append("samples.function: must return {input name: batch-first array}")
        return None
    _compare(samples, tuple(t for t in pipeline.inputs if not t.optional or t.name in samples),
             "samples.function", "the request tensor", problems, "the samples")  # fmt: skip
    if problems:
        return None
    rows = {len(np.asarray(v)) for v in samples.values()}
    if len(rows) != 1 or min(rows) < MIN_SAMPLE_ROWS:
        problems.append(
            f"samples.function: returns {sorted(rows)} rows; give at least {MIN_SAMPLE_ROWS}, the "
            "same number in every tensor (the batch parity check compares them in one batch and "
            "row by row, and the INT8 calibration and the tests use them)"
        )
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
            f"preprocess.function: {pipeline.preprocess.function} failed on the samples"
            f"{_where(exc)}: {exc!r}"
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
    runner = InProcess(pipeline, model.SerializeToString(), quiet_session_options())
    feeds = runner.core_feeds(pre_out)
    results = runner.run_core(feeds)
    who = f"{pipeline.name}: model"
    _check_core_outputs(model, feeds, runner.names, results, problems, who)
    if problems:
        return probe
    post_in = runner.post_inputs(pre_out, results)
    try:
        post_out = post(post_in)
    except Exception as exc:
        problems.append(
            f"postprocess.function: {pipeline.postprocess.function} failed on the samples"
            f"{_where(exc)}: {exc!r}"
        )
        return probe
    _compare(post_out, pipeline.outputs, "postprocess.function", "the response tensor", problems,
             "the ONNX graph's outputs nor postprocess's outputs")  # fmt: skip
    return probe
