"""Reading a pipeline of several core models: named ``[models.<key>]`` tables and a ``[[step]]``
list (:func:`parse_graph`).

A description with either of those reads into
:class:`~tritonrepo.description.schema.GraphPipeline` instead of the single-core
:class:`~tritonrepo.description.schema.Pipeline` (a file with ``[preprocess]``,
``[model]`` and ``[postprocess]`` keeps that shape). The steps become one ensemble; each
takes tensors by name, the request's or those of steps listed before it (Triton starts a step
when its tensors are there, so independent steps run at the same time)::

    [models.detector]                  # any field of a [model] table; model = "<name>_detector"
    build = "pipelines.ocr.models:detector"
    same_shape_batches = true

    [[step]]                           # a Python step: function (or step class), inputs, outputs
    function = "pipelines.ocr.steps:preprocess"
    inputs = ["IMAGE"]
    outputs = [{ name = "det_input", dtype = "FP32", dims = [3, -1, -1] }]

    [[step]]                           # a core step: graph tensor -> pipeline tensor
    core = "detector"
    inputs = { x = "det_input" }
    outputs = { "sigmoid_0.tmp_0" = "det_map" }

    [[step]]                           # a Python step may call declared models through BLS
    function = "pipelines.ocr.steps:recognise"
    inputs = ["det_map"]
    calls = ["recogniser"]
    outputs = [{ name = "TEXT", dtype = "BYTES", dims = [1] }]

A core step's ``inputs``/``outputs`` map its graph's tensor names to the pipeline's (a graph
tensor not listed keeps its own name); a Python step's ``calls`` lists ``[models.<key>]`` keys,
and its function is then called ``function(inputs, models)``, ``models[key](tensors) ->
tensors`` (:mod:`tritonrepo.pipelines.step_calls`). A model that no step runs must be called by
one. ``[canary]`` is read as for one core (its ``output`` one of the pipeline's); ``[drift]`` is
refused. The wiring against the graphs (names, dtypes, dims) is checked by the generator
(``builders.pipeline.kinds.graph``), which also runs the whole chain on the samples.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from tritonrepo.description.parse.model_tables import read_core, read_step
from tritonrepo.description.parse.options import parse_canary
from tritonrepo.description.parse.reader import (
    Reader,
    read_function_table,
    read_probe,
    read_tensors,
)
from tritonrepo.description.schema.graph import GraphPipeline, GraphStep
from tritonrepo.description.schema.tables import (
    DEFAULT_MAX_BATCH_SIZE,
    NAME_PATTERN,
    Core,
    DescriptionError,
    Step,
)

GRAPH_KEYS = ("models", "step")  # a description with either is a graph description


def is_graph(data: Mapping[str, Any]) -> bool:
    """True when parsed TOML ``data`` is a graph description."""
    return any(key in data for key in GRAPH_KEYS)


_TOP_KEYS = (
    "name",
    "summary",
    "doc",
    "max_batch_size",
    "input",
    "output",
    "models",
    "step",
    "samples",
    "probe",
    "tests",
    "one_step_gpu",
    "canary",
    "drift",
)


def _cores(r: Reader, raw: Any, name: str, max_batch: int) -> dict[str, Core]:
    if not isinstance(raw, dict) or not raw:
        r.problem("models", "add one [models.<key>] table per core model (like [model])")
        return {}
    cores = {}
    for key, table in raw.items():
        if not NAME_PATTERN.match(key):
            r.problem(f"models.{key}", "the key must be lower-case letters, digits and _")
        sub = Reader()
        core = read_core(sub, table, name, max_batch)
        r.problems += [f"models.{key}{p[len('model') :]}" for p in sub.problems]
        model = table.get("model") if isinstance(table, dict) else None
        cores[key] = core if isinstance(model, str) else replace(core, model=f"{name}_{key}")
    return cores


def _names(r: Reader, raw: Any, where: str) -> tuple[str, ...]:
    if not isinstance(raw, list) or not raw or not all(isinstance(n, str) for n in raw):
        r.problem(where, f"{raw!r}: give a non-empty list of tensor names")
        return ()
    if len(set(raw)) != len(raw):
        r.problem(where, f"{raw!r}: a tensor is listed twice")
    return tuple(raw)


def _map(r: Reader, raw: Any, where: str) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
        r.problem(where, f"{raw!r}: give a table of graph tensor = 'pipeline tensor'")
        return {}
    return dict(raw)


def _python_step(
    r: Reader, raw: dict, where: str, name: str, cores: Mapping[str, Core]
) -> tuple[Step, tuple[str, ...]]:
    ref = raw.get("function") or raw.get("step") or ""
    attribute = str(ref).rpartition(":")[2].lower()
    own = {k: v for k, v in raw.items() if k not in ("inputs", "calls")}
    step = read_step(r, own, where, f"{name}_{attribute}", True)
    calls = raw.get("calls", [])
    if not isinstance(calls, list) or not all(isinstance(c, str) for c in calls):
        r.problem(f"{where}.calls", f"{calls!r}: give a list of [models.<key>] keys")
        calls = []
    for key in calls:
        if key not in cores:
            r.problem(
                f"{where}.calls", f"'{key}' is not a [models.<key>] key; keys: {', '.join(cores)}"
            )
    if calls and step.function is None:
        r.problem(
            f"{where}.calls",
            "a step class declares its calls with the model names; "
            "use function = 'module:function' here",
        )
    inputs = _names(r, raw.get("inputs"), f"{where}.inputs")
    return replace(step, calls=tuple(dict.fromkeys(calls))), inputs


def _steps(r: Reader, raw: Any, name: str, cores: Mapping[str, Core]) -> list[GraphStep]:
    if not isinstance(raw, list) or not raw:
        r.problem("step", "add [[step]] tables, in the order they run")
        return []
    steps = []
    for i, table in enumerate(raw):
        where = f"step[{i}]"
        if not isinstance(table, dict):
            r.problem(where, "must be a table")
            continue
        if "core" in table:
            r.unknown(table, ("core", "inputs", "outputs"), where)
            key = r.get(table, "core", where, str, "")
            if key not in cores:
                r.problem(
                    f"{where}.core",
                    f"{key!r} is not a [models.<key>] key; keys: {', '.join(cores)}",
                )
            steps.append(
                GraphStep(
                    i,
                    core=key,
                    input_map=_map(r, table.get("inputs"), f"{where}.inputs"),
                    output_map=_map(r, table.get("outputs"), f"{where}.outputs"),
                )
            )
        else:
            step, inputs = _python_step(r, table, where, name, cores)
            steps.append(GraphStep(i, python=step, inputs=inputs))
    return steps


def parse_graph(data: Mapping[str, Any], source: Path) -> GraphPipeline:
    """A :class:`GraphPipeline` from parsed TOML ``data`` (the module docstring's shape).

    Raises:
        DescriptionError: every structural problem, each naming its field and the fix.
    """
    r = Reader()
    r.unknown(data, _TOP_KEYS, "")
    if r.get(data, "one_step_gpu", "", bool, False):
        r.problem("one_step_gpu", "a description of several models is served as its own graph "
                  "(an ensemble of its steps); drop one_step_gpu")  # fmt: skip
    name = r.get(data, "name", "", str, "")
    if not NAME_PATTERN.match(name):
        r.problem("name", f"{name!r}: give a lower-case name of letters, digits and _")
    max_batch = r.get(data, "max_batch_size", "", int, DEFAULT_MAX_BATCH_SIZE)
    if max_batch < 1:
        r.problem("max_batch_size", f"{max_batch}: give 1 or more")
    cores = _cores(r, data.get("models"), name, max_batch)
    steps = _steps(r, data.get("step"), name, cores)
    pipeline = GraphPipeline(
        name=name,
        summary=r.get(data, "summary", "", str, ""),
        doc=r.get(data, "doc", "", str, ""),
        max_batch_size=max_batch,
        inputs=read_tensors(r, data.get("input"), "input"),
        outputs=read_tensors(r, data.get("output"), "output"),
        cores=cores,
        steps=tuple(steps),
        samples=read_function_table(r, data, "samples"),
        probe=read_probe(r, data["probe"]) if "probe" in data else None,
        tests=r.get(data, "tests", "", bool, True),
        source=source,
    )
    if not pipeline.inputs or not pipeline.outputs:
        r.problem("input", "add [[input]] and [[output]] tables (name, dtype, dims)")
    if "canary" in data:
        canary = parse_canary(r, data["canary"], [t.name for t in pipeline.outputs])
        pipeline = replace(pipeline, canary=canary)
    if "drift" in data:
        r.problem("drift", "input features are counted in the one model that receives a "
                  "single-core pipeline's requests; a description of several models has no "
                  "such model yet: drop [drift]")  # fmt: skip
    names = pipeline.models
    for model in {m for m in names if names.count(m) > 1}:
        r.problem("step", f"model name '{model}' is used twice; set model = '...' to tell apart")
    for model in names[1:]:
        if not NAME_PATTERN.match(model):
            r.problem("step", f"{model!r} is not a valid model name (lower-case, digits, _)")
    used = {s.core for s in steps} | {c for s in steps if s.python for c in s.python.calls}
    for key in cores:
        if key not in used:
            r.problem(
                f"models.{key}",
                "no step runs or calls it; add a [[step]] core = "
                f"'{key}' or calls = ['{key}'], or drop the table",
            )
    if pipeline.samples is None and pipeline.tests:
        r.problem("samples", "is missing; add [samples] function = 'module:function'")
    if r.problems:
        raise DescriptionError(source, r.problems)
    return pipeline
