"""The model tables of a single-core description: the ``[preprocess]`` and ``[postprocess]``
steps (a function or a step class, its extra outputs, its BLS ``calls``) and the ``[model]``
core (its source, versions, config sets), each read into
:class:`~tritonrepo.description.schema.Step` or :class:`~tritonrepo.description.schema.Core`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from tritonrepo.description.parse.reader import (
    DEPLOYMENT_KEYS,
    Reader,
    read_deployments,
    read_tensors,
)
from tritonrepo.description.schema.tables import (
    NAME_PATTERN,
    REF_PATTERN,
    Core,
    Deployment,
    Step,
)
from tritonrepo_format.config_sets import TORCH_GPU_SET

_STEP_KEYS = (
    "model",
    "function",
    "step",
    "outputs",
    "calls",
    "doc",
    "cpu",
    TORCH_GPU_SET,
    *DEPLOYMENT_KEYS,
)


def _calls(r: Reader, raw: Mapping[str, Any], where: str, step: str | None) -> tuple[str, ...]:
    """The ``calls`` list of a step table: model names, each once. What they must exist in is
    checked by the generator (it knows the repository)."""
    calls = r.get(raw, "calls", where, list, [])
    field_name = f"{where}.calls"
    names = []
    for name in calls:
        if not isinstance(name, str) or not NAME_PATTERN.match(name):
            r.problem(field_name, f"{name!r} is not a model name (lower-case, digits, _)")
        elif name in names:
            r.problem(field_name, f"'{name}' is listed twice; give each model once")
        else:
            names.append(name)
    if names and step is None and "function" in raw:
        r.problem(
            field_name,
            "a function step calls models in a multi-model description: declare the model "
            "in a [models.<key>] table and the steps as [[step]] (docs/models/"
            "add_your_own_model.md); or use step = 'module:Class', a PythonStep subclass that "
            "makes the BLS call (pb_utils.InferenceRequest), as ctr_session does",
        )
    return tuple(names)


STEP_DEFAULT = Deployment(instances=1, max_queue_delay_us=0)


def read_step(r: Reader, raw: Any, where: str, default_model: str, extra_outputs: bool) -> Step:
    """A step table (``[preprocess]``, ``[postprocess]``, a ``[[step]]``): its model (default
    ``default_model``), function or step class, ``outputs`` (when ``extra_outputs``), ``calls``
    and config sets."""
    if not isinstance(raw, dict):
        r.problem(where, f"is missing; add a [{where}] table with function = 'module:function'")
        raw = {}
    r.unknown(
        raw, _STEP_KEYS if extra_outputs else tuple(k for k in _STEP_KEYS if k != "outputs"), where
    )
    function = r.get(raw, "function", where, str, None)
    step = r.get(raw, "step", where, str, None)
    if (function is None) == (step is None) and raw:
        r.problem(
            where, "give exactly one of function = 'module:function' or step = 'module:Class'"
        )
    for key, ref in (("function", function), ("step", step)):
        if ref is not None and not REF_PATTERN.match(ref):
            r.problem(f"{where}.{key}", f"{ref!r} is not 'package.module:{key}'")
    docs = r.get(raw, "doc", where, str, "")
    defaults = {"default": replace(STEP_DEFAULT, doc=docs)}
    calls = _calls(r, raw, where, step)
    deployments = read_deployments(r, raw, where, defaults)
    if any(d.priority_levels for d in deployments.values()):
        r.problem(
            f"{where}.priority_levels",
            "priority levels are the core model's ([model] priority_levels = 2): a step's "
            "queue stays Triton's plain one",
        )
    return Step(
        model=r.get(raw, "model", where, str, default_model),
        function=function,
        step=step,
        outputs=read_tensors(r, raw.get("outputs"), f"{where}.outputs"),
        deployments=deployments,
        doc=docs,
        calls=calls,
    )


_CORE_KEYS = (
    "model",
    "onnx",
    "build",
    "builder",
    "versions",
    "int8",
    "fixed_dims",
    "constants",
    "same_shape_batches",
    "input",
    "output",
    "doc",
    "cpu",
    TORCH_GPU_SET,
    *DEPLOYMENT_KEYS,
)


def core_defaults(max_batch_size: int, doc: str) -> dict[str, Deployment]:
    """The config sets of a core model when the description sets nothing: one GPU instance
    batching up to ``max_batch_size`` with a 200 µs queue delay and powers of two from 8 as
    preferred sizes (the shipped image classifier's choices, docs/models/config_choices.md);
    one CPU instance with no queue delay, ONNX Runtime on all cores without spinning."""
    preferred = tuple(p for p in (8, 16, 32, 64, 128, 256) if p <= max_batch_size)
    return {
        "default": Deployment(1, 200, preferred, None, {}, doc),
        "cpu": Deployment(1, 0, (), None, {"intra_op_threads": "0", "allow_spinning": "0"}, ""),
    }


def read_core(r: Reader, raw: Any, name: str, max_batch_size: int) -> Core:
    """The ``[model]`` table (or a ``[models.<key>]`` one, its problems named ``model...``):
    its source, versions, config sets over :func:`core_defaults`, fixed dims, declared I/O."""
    where = "model"
    if not isinstance(raw, dict):
        r.problem(
            where,
            "is missing; add a [model] table with onnx = 'file.onnx' or build = 'module:function'",
        )
        raw = {}
    r.unknown(raw, _CORE_KEYS, where)
    sources = {k: r.get(raw, k, where, str, None) for k in ("onnx", "build", "builder")}
    given = [k for k, v in sources.items() if v is not None]
    if len(given) != 1 and raw:
        r.problem(
            where,
            f"give exactly one of onnx = 'file.onnx', build = 'module:function' or builder = "
            f"'package.module' (got {', '.join(given) or 'none'})",
        )
    if sources["build"] is not None and not REF_PATTERN.match(sources["build"]):
        r.problem(f"{where}.build", f"{sources['build']!r} is not 'package.module:function'")
    versions = r.get(raw, "versions", where, list, [1])
    if not versions or any(not isinstance(v, int) or v < 1 for v in versions):
        r.problem(f"{where}.versions", f"{versions!r}: give version numbers >= 1, e.g. [1]")
    fixed = r.get(raw, "fixed_dims", where, dict, {})
    for key, dims in fixed.items():
        if not isinstance(dims, list) or any(not isinstance(d, int) or d < 1 for d in dims):
            r.problem(f"{where}.fixed_dims.{key}", f"{dims!r}: give fixed sizes >= 1")
    constants = _constants(r, r.get(raw, "constants", where, dict, {}), where)
    if constants and sources["builder"] is not None:
        r.problem(f"{where}.constants", "a builder core writes its own graph: bind the inputs "
                  "there, or describe the core with onnx or build")  # fmt: skip
    doc = r.get(raw, "doc", where, str, "")
    if TORCH_GPU_SET in raw and sources["onnx"] is not None:
        r.problem(
            f"{where}.torch_gpu",
            "a torch.export program (model.pt2) is exported from a torch module: give "
            "build = 'module:function' returning (torch.nn.Module, {input: example tensor}), "
            "or leave [model.torch_gpu] out (the torch_gpu set then runs the ONNX model with "
            "ONNX Runtime on CPU instances)",
        )
    if sources["builder"] is not None and not (raw.get("input") and raw.get("output")):
        r.problem(
            where,
            "a builder core declares its I/O: add [[model.input]] and [[model.output]] tables",
        )
    return Core(
        model=r.get(raw, "model", where, str, f"{name}_model"),
        onnx=sources["onnx"],
        build=sources["build"],
        builder=sources["builder"],
        versions=tuple(v for v in versions if isinstance(v, int)),
        int8=r.get(raw, "int8", where, bool, False),
        deployments=read_deployments(r, raw, where, core_defaults(max_batch_size, doc)),
        fixed_dims={k: tuple(v) for k, v in fixed.items() if isinstance(v, list)},
        same_shape_batches=r.get(raw, "same_shape_batches", where, bool, False),
        doc=doc,
        inputs=read_tensors(r, raw.get("input"), f"{where}.input"),
        outputs=read_tensors(r, raw.get("output"), f"{where}.output"),
        constants=constants,
    )


def _constants(r: Reader, raw: dict, where: str) -> dict[str, Any]:
    """``constants``: graph input name -> a number or (nested) lists of numbers, all of one
    rank; problems reported to ``r``."""

    def numeric(value: Any) -> bool:
        if isinstance(value, list):
            return bool(value) and all(numeric(v) for v in value)
        return isinstance(value, (int, float)) and not isinstance(value, bool)

    out = {}
    for key, value in raw.items():
        if not numeric(value):
            r.problem(f"{where}.constants.{key}", f"{value!r}: give a number or a list of "
                      "numbers (the value the graph input takes on every request)")  # fmt: skip
            continue
        out[key] = value
    return out
