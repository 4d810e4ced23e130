"""The checks of a graph description (``[models.<key>]`` and ``[[step]]``) before anything is
written (:func:`check_graph`): each core's graph, the wiring of the steps, and the whole chain
on the samples in one process (:class:`builders.pipeline.graph_in_process.GraphInProcess`).

The wiring rules: a step takes only request tensors or outputs of earlier steps (so the steps
can never form a cycle); a tensor is made once; a core step's graph inputs get tensors of their
dtype and of compatible dims (``-1`` matches any size); every request tensor is used and every
response tensor is made, with its declared dtype and dims. Each problem names its field and
the fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from builders.pipeline import checks, checks_samples, declared
from builders.pipeline.graph import ModelSourceError, graph_io, obtain_model
from builders.pipeline.graph_in_process import GraphInProcess
from builders.pipeline.render import CoreTensor
from tritonrepo.description import DescriptionError, GraphPipeline, Tensor


@dataclass(frozen=True)
class GraphChecked:
    """What the checks established: per core key its config tensors, ONNX model and whether a
    TensorRT plan can serve it (no dynamic non-batch dims, no ``ai.onnx.ml``); per Python step
    (by index) its input and output tensors; the probe JSON (None without samples); the
    tensors each step's output_map names (consumed later or answered)."""

    core_inputs: Mapping[str, tuple[CoreTensor, ...]]
    core_outputs: Mapping[str, tuple[CoreTensor, ...]]
    models: Mapping[str, Any]
    tensorrt: Mapping[str, bool]
    step_inputs: Mapping[int, tuple[Tensor, ...]]
    step_outputs: Mapping[int, tuple[Tensor, ...]]
    mapped_outputs: Mapping[int, tuple[str, ...]]
    probe: str | None


def _fits(got: Tensor, want: Tensor) -> bool:
    return (
        got.dtype == want.dtype
        and len(got.dims) == len(want.dims)
        and all(a == b or -1 in (a, b) for a, b in zip(got.dims, want.dims, strict=True))
    )


def _show(t: Tensor) -> str:
    return f"{t.dtype} {list(t.dims)}"


def _wiring(pipeline: GraphPipeline, core_in: Mapping, core_out: Mapping, problems: list[str]):
    """The static wiring (module docstring); returns the Python steps' input and output
    tensors and each step's consumed-or-answered outputs."""
    available: dict[str, tuple[Tensor, str]] = {t.name: (t, "input") for t in pipeline.inputs}
    used: set[str] = set()
    step_in: dict[int, tuple[Tensor, ...]] = {}
    step_out: dict[int, tuple[Tensor, ...]] = {}
    made: dict[int, list[str]] = {}

    def take(name: str, field: str, want: Tensor | None) -> Tensor | None:
        if name not in available:
            known = ", ".join(available)
            problems.append(
                f"{field}: '{name}' is neither a request tensor nor an output of an "
                f"earlier step (a step takes what the steps listed before it make); known: {known}"
            )
            return None
        got, _ = available[name]
        used.add(name)
        if want is not None and not _fits(got, want):
            problems.append(
                f"{field}: '{name}' is {_show(got)}, the model's input "
                f"'{want.name}' is {_show(want)}; make them agree"
            )
        return got

    def make(name: str, tensor: Tensor, field: str, index: int) -> None:
        if name in available:
            problems.append(
                f"{field}: tensor '{name}' is already made by "
                f"{available[name][1]}; rename one of them"
            )
            return
        available[name] = (Tensor(name, tensor.dtype, tensor.dims), f"step[{index}]")
        made.setdefault(index, []).append(name)

    for step in pipeline.steps:
        where = step.where
        if step.python is not None:
            ins = [take(n, f"{where}.inputs", None) for n in step.inputs]
            step_in[step.index] = tuple(t for t in ins if t is not None)
            step_out[step.index] = step.python.outputs
            if not step.python.outputs:
                problems.append(f"{where}.outputs: add the tensors the function returns")
            for t in step.python.outputs:
                make(t.name, t, f"{where}.outputs", step.index)
            continue
        key = step.core or ""
        if key not in core_in:
            continue
        in_map, out_map = step.input_map or {}, step.output_map or {}
        graph_in = {c.name for c in core_in[key]}
        graph_out = {c.name for c in core_out[key]}
        for field, names, graph in (("inputs", in_map, graph_in), ("outputs", out_map, graph_out)):
            for g in names:
                if g not in graph:
                    problems.append(
                        f"{where}.{field}: the model has no {field[:-1]} '{g}'; its "
                        f"{field}: {', '.join(sorted(graph))}"
                    )
        for c in core_in[key]:
            take(in_map.get(c.name, c.name), f"{where}.inputs", c.as_tensor())
        for c in core_out[key]:
            make(out_map.get(c.name, c.name), c.as_tensor(), f"{where}.outputs", step.index)
    for t in pipeline.outputs:
        got = take(t.name, "output", None)
        if got is not None and not _fits(got, t):
            problems.append(
                f"output: '{t.name}' is made as {_show(got)} by "
                f"{available[t.name][1]}, declared {_show(t)}; make them agree"
            )
    for t in pipeline.inputs:
        if t.name not in used:
            problems.append(
                f"input: request tensor '{t.name}' is taken by no step; take it in "
                "a step's inputs or drop it"
            )
    mapped = {i: tuple(n for n in names if n in used) for i, names in made.items()}
    return step_in, step_out, mapped


def _cores(pipeline: GraphPipeline, problems: list[str]):
    core_in, core_out, models, tensorrt = {}, {}, {}, {}
    for key, core in pipeline.cores.items():
        field = f"models.{key}"
        if core.builder is not None or core.int8:
            problems.append(
                f"{field}: a builder module and int8 are for single-core "
                "descriptions; give onnx = '...' or build = 'module:function'"
            )
            continue
        view = pipeline.core_view(key)
        sub: list[str] = []
        checks._import(core.build, f"{field}.build", sub)
        if not sub:
            try:
                models[key] = obtain_model(view)
            except ModelSourceError as exc:
                sub.append(str(exc))
        if key in models:
            ins, outs = checks._core_tensors(view, graph_io(models[key]), sub)
            core_in[key], core_out[key] = ins, outs
            dynamic = any(-1 in c.dims for c in ins)
            tensorrt[key] = checks.tensorrt_parses(models[key]) and not dynamic
        problems += [p.replace("model", field, 1) if p.startswith("model") else p for p in sub]
    return core_in, core_out, models, tensorrt


def _run_chain(
    pipeline: GraphPipeline, models: Mapping[str, Any], samples: dict, problems: list[str]
) -> None:
    """The samples through every step, each hand-over checked against the wiring."""
    options = checks_samples.quiet_session_options()
    runner = GraphInProcess(
        pipeline, {k: m.SerializeToString() for k, m in models.items()}, options
    )
    tensors = dict(samples)
    for step in pipeline.steps:
        where = step.where
        if step.python is not None and step.python.function is None:
            return  # a step class runs only in the server
        try:
            out = runner.run_step(step, tensors)
        except Exception as exc:
            what = step.python.ref if step.python is not None else f"core '{step.core}'"
            problems.append(
                f"{where}: {what} failed on the samples{checks_samples._where(exc)}: {exc!r}"
            )
            return
        if step.python is not None:
            field = f"{where}.function"
            checks_samples._compare(
                out, step.python.outputs, field, "declared in its outputs", problems, None
            )
            extra = sorted(set(out) - {t.name for t in step.python.outputs})
            if extra:
                problems.append(
                    f"{field}: returns {extra}, not declared in its outputs; "
                    "declare them or drop them"
                )
        else:
            core = runner.cores[step.core or ""]
            who = f"{pipeline.name}: models.{step.core}"
            checks_samples._check_core_outputs(
                models[step.core], core.feeds[-1], core.names, core.last, problems, who
            )
        if problems:
            return
        tensors.update(out)
    checks_samples._compare(
        tensors,
        pipeline.outputs,
        "output",
        "the response tensor",
        problems,
        "the request nor any step's outputs",
    )


def _samples(pipeline: GraphPipeline, problems: list[str]) -> tuple[dict | None, str | None]:
    """The samples (checked against the request tensors) and the probe JSON: the ``[probe]``
    table when the description has one (:func:`builders.pipeline.declared.probe_json`), else the
    smallest sample row."""
    declared_probe = declared.probe_json(pipeline, problems)  # type: ignore[arg-type]
    make = checks._import(pipeline.samples, "samples.function", problems)
    if make is None:
        return None, declared_probe
    try:
        samples = make()
    except Exception as exc:
        problems.append(f"samples.function: failed{checks_samples._where(exc)}: {exc!r}")
        return None, None
    if not isinstance(samples, dict):
        problems.append("samples.function: must return {input name: batch-first array}")
        return None, None
    checks_samples._compare(
        samples, pipeline.inputs, "samples.function", "the request tensor", problems, "the samples"
    )
    counts = {len(np.asarray(v)) for v in samples.values()}
    if len(counts) != 1 or min(counts) < checks_samples.MIN_SAMPLE_ROWS:
        problems.append(
            f"samples.function: returns {sorted(counts)} rows; give at least "
            f"{checks_samples.MIN_SAMPLE_ROWS}, the same number in every tensor"
        )
    if problems:
        return None, None
    if declared_probe is not None:
        return samples, declared_probe
    probe = checks_samples.probe_json(pipeline, samples)  # type: ignore[arg-type]
    if len(probe) > checks_samples.PROBE_LIMIT_BYTES:
        problems.append(
            f"samples.function: the smallest sample request is {len(probe)} bytes as JSON, over "
            f"{checks_samples.PROBE_LIMIT_BYTES} for the health probe in the config; declare a "
            "smaller one in a [probe] table"
        )
    return samples, probe


def check_graph(
    pipeline: GraphPipeline, repository: Path, owned: set[str], force: bool = False
) -> GraphChecked:
    """Every check of the module docstring, in one pass (the arguments as
    :func:`builders.pipeline.checks.check`).

    Raises:
        DescriptionError: every problem found, nothing written.
    """
    problems: list[str] = []
    checks._check_clashes(pipeline, repository, owned, force, problems)  # type: ignore[arg-type]
    for step in pipeline.python_steps:
        assert step.python is not None
        kind = "function" if step.python.function else "step"
        checks._import(step.python.ref, f"{step.where}.{kind}", problems)
    core_in, core_out, models, tensorrt = _cores(pipeline, problems)
    step_in, step_out, mapped = {}, {}, {}
    if not problems:
        step_in, step_out, mapped = _wiring(pipeline, core_in, core_out, problems)
    probe = None
    if not problems:
        samples, probe = _samples(pipeline, problems)
        if samples is not None and not problems:
            _run_chain(pipeline, models, samples, problems)
    if problems:
        raise DescriptionError(pipeline.source, problems)
    return GraphChecked(core_in, core_out, models, tensorrt, step_in, step_out, mapped, probe)
