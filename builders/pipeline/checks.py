"""The checks of a description against its ONNX graph, its functions and the repository, run
by the generator before it writes anything (:func:`check`).

Each problem names the description's field and the fix, e.g.::

    pipelines/x/pipeline.toml: preprocess.function: output 'features' is float64, the core
    model's input 'features' is FP32; cast it in preprocess (astype(np.float32))
"""

from __future__ import annotations

import base64
import difflib
import inspect
import json
import re
import sys
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from builders.pipeline.graph import GraphIO, ModelSourceError, graph_io, obtain_model
from builders.pipeline.in_process import InProcess
from builders.pipeline.render import CoreTensor
from tritonrepo.paths import REPO_ROOT
from tritonrepo.pipelines.description import (
    DTYPES,
    DescriptionError,
    Pipeline,
    Tensor,
    import_ref,
)

MIN_SAMPLE_ROWS = 8  # batch parity needs a batch; INT8 calibration and the tests use them too
# The health probe's JSON in the ensemble config, at most: the self-healing supervisor sends it
# to every served model every heal interval (10 s) and every health check parses the config, so
# a big request there costs all the time; a description with big samples gives a [probe] row.
PROBE_LIMIT_BYTES = 64 * 1024


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


def _core_graph(pipeline: Pipeline, problems: list[str]) -> tuple[Any, GraphIO | None]:
    """The core's ONNX model and its inputs and outputs, when the description gives the graph
    (``onnx`` or ``build``; None for a ``builder`` core or after earlier problems); an import or
    model-source problem is added to ``problems``."""
    _import(pipeline.core.build, "model.build", problems)
    if pipeline.core.builder is not None or problems:
        return None, None
    try:
        model = obtain_model(pipeline)
    except ModelSourceError as exc:
        problems.append(str(exc))
        return None, None
    return model, graph_io(model)


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


def _owner(folder: Path) -> str:
    """Who made an existing model folder: the description its config was generated from, or
    '' (written by hand, or shipped)."""
    config = folder / "config.pbtxt"
    text = config.read_text(errors="replace") if config.is_file() else ""
    match = re.search(r"Generated by tritonrepo-new from (\S+?):?$", text, re.M)
    return f"generated from {match[1]}" if match else ""


def _where(exc: BaseException) -> str:
    """``file:line`` of the innermost frame of ``exc``'s traceback, or ''."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return ""
    frame = frames[-1]
    path = Path(frame.filename)
    shown = path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path
    return f" at {shown}:{frame.lineno}"


def _import(ref: str | None, field: str, problems: list[str]) -> Any:
    if ref is None:
        return None
    module_name, _, attribute = ref.partition(":")
    try:
        return import_ref(ref)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):  # the module itself
            fix = (
                "the module must be importable from the checkout root "
                "(pipelines/<name>/<module>.py, with __init__.py files)"
            )
        else:  # found, but something it imports is not installed
            fix = f"install '{exc.name}' (pin it in requirements.txt) or fix the import"
        problems.append(f"{field}: cannot import {ref!r}: {exc}; {fix}")
    except ImportError as exc:
        if str(exc).startswith(f"module '{module_name}' has no attribute"):
            module = sys.modules.get(module_name)
            names = sorted(
                n
                for n, v in (vars(module).items() if module else ())
                if inspect.isfunction(v) and v.__module__ == module_name and n[0] != "_"
            )
            close = difflib.get_close_matches(attribute, names, n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            problems.append(f"{field}: {exc}; {hint}its functions: {', '.join(names) or 'none'}")
        else:
            problems.append(f"{field}: importing {module_name} failed{_where(exc)}: {exc}")
    except Exception as exc:
        problems.append(f"{field}: importing {module_name} failed{_where(exc)}: {exc!r}")
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


def _probe(pipeline: Pipeline, samples: Mapping[str, np.ndarray], problems: list[str]) -> str:
    """The probe JSON: the ``[probe]`` function's row when the description has one, else the
    smallest sample row; a problem when it is over :data:`PROBE_LIMIT_BYTES`."""
    field, rows = "samples.function", samples
    if pipeline.probe is not None:
        field = "probe.function"
        make = _import(pipeline.probe, field, problems)
        try:
            rows = make() if make is not None else samples
        except Exception as exc:
            problems.append(f"{field}: {pipeline.probe}() failed{_where(exc)}: {exc!r}")
        if not isinstance(rows, dict):
            problems.append(f"{field}: must return {{input name: batch-first array}}")
            rows = samples
        _compare(rows, tuple(t for t in pipeline.inputs if not t.optional or t.name in rows),
                 field, "the request tensor", problems, "the probe row")  # fmt: skip
        if problems:
            rows = samples
    probe = probe_json(pipeline, rows)
    if len(probe) > PROBE_LIMIT_BYTES:
        problems.append(
            f"{field}: the smallest {'probe' if pipeline.probe else 'sample'} request is "
            f"{len(probe)} bytes as JSON, over {PROBE_LIMIT_BYTES} for the health probe in the "
            "config; add [probe] function = 'module:function' returning one small row"
        )
    return probe


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
    if pipeline.stateful:
        from builders.pipeline.checks_stateful import check_stateful

        return check_stateful(pipeline, repository, owned, force)
    problems: list[str] = []
    _check_clashes(pipeline, repository, owned, force, problems)
    _check_calls(pipeline, repository, problems)
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
    model, io = _core_graph(pipeline, problems)
    core_inputs, core_outputs = _core_tensors(pipeline, io, problems)
    probe = None
    if make_samples is not None and not problems:
        probe = _run_samples(
            pipeline, make_samples, pre, post, model, core_inputs, core_outputs, problems
        )
    if problems:
        raise DescriptionError(pipeline.source, problems)
    return Checked(core_inputs, core_outputs, probe, model, model is None or tensorrt_parses(model))


def _check_clashes(pipeline: Pipeline, repository: Path, owned: set[str], force: bool,
                   problems: list[str]) -> None:  # fmt: skip
    """Each of the pipeline's models against the folders already in ``repository``."""
    for field, model in zip(pipeline.model_fields, pipeline.models, strict=True):
        if (repository / model).exists() and model not in owned and not force:
            owner = _owner(repository / model)
            problems.append(
                f"{field}: '{model}' clashes with an existing model in {repository.name}/"
                f"{f' ({owner})' if owner else ''}; "
                + (
                    "pick another name"
                    if field == "name"
                    else f"set {field} = '<another name>', or pick another name"
                )
                + " (--force replaces that model: its files are lost)"
            )


def _check_calls(pipeline: Pipeline, repository: Path, problems: list[str]) -> None:
    """Each model a step ``calls`` is in ``repository`` (a folder with ``config.pbtxt``) or is
    one of this pipeline's own models."""
    known = sorted(
        {p.parent.name for p in repository.glob("*/config.pbtxt")} | set(pipeline.models[1:])
    )
    for where, step in (("preprocess", pipeline.preprocess), ("postprocess", pipeline.postprocess)):
        for called in step.calls:
            if called in known or called in (step.model, pipeline.name):
                continue  # a call to itself is the description's own error
            close = difflib.get_close_matches(called, known, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            problems.append(
                f"{where}.calls: no model '{called}' in {repository.name}/{hint}; give the name "
                "of a model folder there (generate a called pipeline first: tritonrepo-new "
                "pipeline <its name>)"
            )


def tensorrt_parses(model: Any) -> bool:
    """False when the graph uses an operator domain TensorRT's ONNX parser has no kernels for
    (``ai.onnx.ml``: scikit-learn's Scaler, LinearClassifier, TreeEnsemble...)."""
    return not any(node.domain == "ai.onnx.ml" for node in model.graph.node)


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
    probe = _probe(pipeline, samples, problems)
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
    results = runner.run_core(runner.core_feeds(pre_out))
    _check_declared_outputs(graph_io(model), runner.names, results, problems)
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
