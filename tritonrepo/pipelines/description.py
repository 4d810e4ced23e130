"""A pipeline described once: ``pipelines/<name>/pipeline.toml``, read into :class:`Pipeline`.

The file is TOML (read with the standard library's ``tomllib``; Python 3.10 reads it with
``tomli`` when installed). Its fields, their defaults and an example are in
``docs/models/add_your_own_model.md``. :func:`load` checks the file's own structure (types,
names, dtypes, dims, references) and raises one :class:`DescriptionError` listing every problem,
each naming its field and the fix; the checks that need the ONNX graph or the user's functions
run in the generator (``builders.pipeline.checks``), also before anything is written.

Three Triton models come from a description, each in its own folder of the model repository:
``<name>_preprocess`` and ``<name>_postprocess`` (Python backend, the user's functions behind
:class:`tritonrepo.pipelines.function_step.FunctionStep`, or a :class:`PythonStep` subclass of
this repository), the core ``<name>_model`` (a TensorRT plan in ``config.pbtxt``, ONNX Runtime in
``configs/cpu.pbtxt``) and the ensemble ``<name>`` that chains them.
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tritonrepo.pipelines.core_state import CoreState, parse_core_state
from tritonrepo.pipelines.stateful import (
    SequenceSpec,
    SessionSpec,
    check_stateful_tables,
    parse_sequence,
    parse_session,
    session_outputs,
)
from tritonrepo_client.model_repository.config_sets import CONFIG_SETS as CONFIG_SET_TABLE
from tritonrepo_client.model_repository.dtypes import DATA_TYPES

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

DESCRIPTION_FILE = "pipeline.toml"
DEFAULT_MAX_BATCH_SIZE = 32
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,47}$")  # a model name and a Python identifier
REF_PATTERN = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")  # package.module:attribute

# Triton's data types a description may use (model_config.proto DataType, without TYPE_; BF16
# has no numpy type) and their numpy types: the one table,
# tritonrepo_client.model_repository.dtypes (the description reader is generator-side code,
# which reads the repository through that bottom layer; tests/layers.py).
DTYPES: Mapping[str, str] = {d.name: d.numpy_name for d in DATA_TYPES if d.has_numpy}
# The config sets a description deploys (the table of
# tritonrepo_client.model_repository.config_sets): config.pbtxt, configs/cpu.pbtxt,
# configs/torch_gpu.pbtxt.
CONFIG_SETS = tuple(CONFIG_SET_TABLE)


class DescriptionError(ValueError):
    """A description cannot be used; ``problems`` holds one line per problem, each
    ``<file>: <field>: <what is wrong>; <the fix>``."""

    def __init__(self, source: Path | str, problems: Sequence[str]) -> None:
        self.problems = [f"{source}: {p}" for p in problems]
        super().__init__("\n".join(self.problems))


@dataclass(frozen=True)
class Tensor:
    """A tensor of a request, response or step: ``dims`` exclude the batch dim, ``-1`` = any
    size; ``dtype`` is a Triton name (``FP32``, ``BYTES``, ...)."""

    name: str
    dtype: str
    dims: tuple[int, ...]
    optional: bool = False
    doc: str = ""
    label_filename: str | None = None  # classification extension: file of class names

    @property
    def numpy_dtype(self) -> str:
        """The numpy dtype name (``object`` for BYTES)."""
        return DTYPES[self.dtype]


@dataclass(frozen=True)
class Deployment:
    """How one config set runs a model: instances per device, batching, parameters.

    ``max_queue_delay_us`` is the dynamic batcher's ``max_queue_delay_microseconds`` (µs);
    ``preferred_batch_sizes`` its ``preferred_batch_size`` (empty = none); ``max_batch_size``
    overrides the pipeline's when set (a core model may batch more rows than one request has).
    ``ragged_inputs`` names the model's inputs declared ``allow_ragged_batch: true`` in this set
    (the batcher joins requests whose shapes differ along their non-batch dims; the backend must
    take such a batch, as ``onnxruntime_python`` with ``sequence_mask_input`` does).
    """

    instances: int = 1
    max_queue_delay_us: int = 0
    preferred_batch_sizes: tuple[int, ...] = ()
    max_batch_size: int | None = None
    parameters: Mapping[str, str] = field(default_factory=dict)
    doc: str = ""
    ragged_inputs: tuple[str, ...] = ()


@dataclass(frozen=True)
class Step:
    """A Python-backend step: the user's ``function`` (``module:function``) or a ``step`` class
    (``module:Class``, a ``PythonStep`` subclass), its extra ``outputs`` (preprocess: tensors
    for postprocess besides the core model's inputs), its config sets (``deployments``: at
    least ``default``, the ``config.pbtxt``) and the models its step class ``calls`` through BLS
    (written into every config set as the ``tritonrepo_calls`` parameter, so the launcher and
    ``tritonrepo-client models load`` load them with the pipeline)."""

    model: str
    function: str | None
    step: str | None
    outputs: tuple[Tensor, ...]
    deployments: Mapping[str, Deployment]
    doc: str = ""
    calls: tuple[str, ...] = ()  # models its step class calls through BLS (tritonrepo_calls)

    @property
    def ref(self) -> str:
        """What runs: the function or the step class reference."""
        return self.function or self.step or ""


@dataclass(frozen=True)
class Core:
    """The core model: an ``onnx`` file, a ``build`` function, or a ``builder`` module of this
    repository that writes it; the ``versions`` that serve; ``int8`` also builds version 2
    (ONNX Runtime static INT8, calibrated on the samples); per-config-set ``deployments``;
    ``fixed_dims`` fixes dynamic non-batch dims of graph inputs (name -> dims)."""

    model: str
    onnx: str | None
    build: str | None
    builder: str | None
    versions: tuple[int, ...]
    int8: bool
    deployments: Mapping[str, Deployment]
    fixed_dims: Mapping[str, tuple[int, ...]]
    same_shape_batches: bool
    doc: str = ""
    inputs: tuple[Tensor, ...] = ()  # declared I/O: required for a builder core
    outputs: tuple[Tensor, ...] = ()


@dataclass(frozen=True)
class Pipeline:
    """A whole description (:func:`load`)."""

    name: str
    summary: str
    doc: str
    max_batch_size: int
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    preprocess: Step
    core: Core
    postprocess: Step
    samples: str | None
    tests: bool
    source: Path
    sequence: SequenceSpec | None = None  # [sequence]: a stateful pipeline (stateful.py)
    session: SessionSpec | None = None  # [session]: its step(state, inputs) function
    probe: Mapping[str, Any] | None = None  # [probe]: the declared health probe (KServe v2 JSON)
    core_state: CoreState | None = None  # [[sequence.state]]: state in the core (core_state.py)

    @property
    def stateful(self) -> bool:
        """True for a pipeline with a ``[sequence]`` table (a session model, no ensemble)."""
        return self.sequence is not None

    @property
    def folder(self) -> Path:
        """The folder of the description (its code lives there too)."""
        return self.source.parent

    @property
    def models(self) -> tuple[str, ...]:
        """The model names: ensemble, preprocess, core, postprocess; for a stateful pipeline
        the session model and the core; with state in the core, the session model alone."""
        if self.core_state is not None and self.session is not None:
            return (self.session.model,)
        if self.session is not None:
            return (self.session.model, self.core.model)
        return (self.name, self.preprocess.model, self.core.model, self.postprocess.model)

    @property
    def model_fields(self) -> tuple[str, ...]:
        """The description's field naming each of :attr:`models`."""
        if self.core_state is not None:
            return ("session.model",)
        if self.session is not None:
            return ("session.model", "model.model")
        return ("name", "preprocess.model", "model.model", "postprocess.model")


# --- reading ----------------------------------------------------------------------------------
class _Reader:
    """Reads typed fields from the parsed TOML, collecting every problem."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def problem(self, where: str, message: str) -> None:
        self.problems.append(f"{where}: {message}")

    def get(self, table: Mapping[str, Any], key: str, where: str, kind: type, default: Any) -> Any:
        if key not in table:
            return default
        value = table[key]
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        if not ok:
            self.problem(
                f"{where}.{key}" if where else key, f"must be {_KIND[kind]}, got {value!r}"
            )
            return default
        return value

    def unknown(self, table: Mapping[str, Any], known: Sequence[str], where: str) -> None:
        known = list(dict.fromkeys(known))
        for key in table:
            if key not in known:
                hint = _closest(key, known)
                self.problem(
                    f"{where}.{key}" if where else key,
                    f"unknown field{hint}; known: {', '.join(known)}",
                )


_KIND = {str: "a string", int: "an integer", bool: "true or false", list: "a list", dict: "a table"}


def _closest(key: str, known: Sequence[str]) -> str:
    import difflib

    match = difflib.get_close_matches(key, known, n=1)
    return f" (did you mean '{match[0]}'?)" if match else ""


def _tensor(r: _Reader, raw: Any, where: str) -> Tensor | None:
    if not isinstance(raw, dict):
        r.problem(where, f"must be a table with name, dtype and dims, got {raw!r}")
        return None
    r.unknown(raw, ("name", "dtype", "dims", "optional", "doc", "label_filename"), where)
    name = r.get(raw, "name", where, str, "")
    dtype = r.get(raw, "dtype", where, str, "")
    dims = r.get(raw, "dims", where, list, None)
    if not name:
        r.problem(f"{where}.name", "is missing; give the tensor's name")
    if not dtype and "dtype" not in raw:
        r.problem(f"{where}.dtype", f"is missing; give one of {', '.join(DTYPES)}")
    elif dtype not in DTYPES:
        r.problem(
            f"{where}.dtype", f"{dtype!r} is not a Triton data type; one of {', '.join(DTYPES)}"
        )
    if dims is None:
        r.problem(f"{where}.dims", "is missing; give the dims without the batch dim, e.g. [3]")
        dims = []
    elif not dims or any(
        not isinstance(d, int) or isinstance(d, bool) or d == 0 or d < -1 for d in dims
    ):
        r.problem(f"{where}.dims", f"{dims!r}: give a non-empty list of sizes > 0 or -1 (any)")
    return Tensor(
        name,
        dtype,
        tuple(int(d) for d in dims if isinstance(d, int)),
        r.get(raw, "optional", where, bool, False),
        r.get(raw, "doc", where, str, ""),
        r.get(raw, "label_filename", where, str, None),
    )


def _tensors(r: _Reader, raw: Any, where: str) -> tuple[Tensor, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        r.problem(where, "must be a list of tensor tables ([[input]] / [[output]])")
        return ()
    tensors = [t for i, item in enumerate(raw) if (t := _tensor(r, item, f"{where}[{i}]"))]
    seen: set[str] = set()
    for t in tensors:
        if t.name in seen:
            r.problem(where, f"tensor '{t.name}' is declared twice; give each tensor once")
        seen.add(t.name)
    return tuple(tensors)


_DEPLOYMENT_KEYS = (
    "instances",
    "max_queue_delay_us",
    "preferred_batch_sizes",
    "max_batch_size",
    "parameters",
    "doc",
    "ragged_inputs",
)


def _deployment(r: _Reader, raw: Mapping[str, Any], where: str, base: Deployment) -> Deployment:
    r.unknown(raw, _DEPLOYMENT_KEYS, where)
    instances = r.get(raw, "instances", where, int, base.instances)
    delay = r.get(raw, "max_queue_delay_us", where, int, base.max_queue_delay_us)
    preferred = r.get(raw, "preferred_batch_sizes", where, list, list(base.preferred_batch_sizes))
    max_batch = r.get(raw, "max_batch_size", where, int, base.max_batch_size)
    parameters = r.get(raw, "parameters", where, dict, dict(base.parameters))
    ragged = r.get(raw, "ragged_inputs", where, list, list(base.ragged_inputs))
    names = [n for n in ragged if isinstance(n, str) and n]
    if len(names) != len(ragged) or len(set(names)) != len(names):
        r.problem(f"{where}.ragged_inputs", f"{ragged!r}: give input names, each once")
    if instances < 1:
        r.problem(f"{where}.instances", f"{instances}: give 1 or more")
    if delay < 0:
        r.problem(f"{where}.max_queue_delay_us", f"{delay}: give 0 or more µs")
    if any(not isinstance(p, int) or p < 1 for p in preferred):
        r.problem(f"{where}.preferred_batch_sizes", f"{preferred!r}: give sizes >= 1")
    bad = [k for k, v in parameters.items() if not isinstance(v, str)]
    if bad:
        r.problem(f"{where}.parameters", f"values of {bad} must be strings (Triton parameters)")
    return Deployment(
        instances,
        delay,
        tuple(p for p in preferred if isinstance(p, int)),
        max_batch,
        {k: str(v) for k, v in parameters.items()},
        r.get(raw, "doc", where, str, base.doc),
        tuple(names),
    )


def _deployments(
    r: _Reader, raw: Mapping[str, Any], where: str, defaults: Mapping[str, Deployment]
) -> dict[str, Deployment]:
    """``default`` (config.pbtxt) from the table's own fields, ``cpu``/``torch_gpu`` from
    sub-tables over it (``defaults`` per set: ``torch_gpu`` only exists when the description has
    that table or a default for it)."""
    own = {k: raw[k] for k in _DEPLOYMENT_KEYS if k in raw}
    default = _deployment(r, own, f"{where}", defaults["default"])
    out = {"default": default}
    for name in ("cpu", "torch_gpu"):
        if name in raw:
            table = raw[name]
            if not isinstance(table, dict):
                r.problem(f"{where}.{name}", "must be a table")
                continue
            base = defaults.get(name, replace(default, doc=""))
            out[name] = _deployment(r, table, f"{where}.{name}", base)
        elif name in defaults:
            out[name] = defaults[name]
    return out


_STEP_KEYS = (
    "model",
    "function",
    "step",
    "outputs",
    "calls",
    "doc",
    "cpu",
    "torch_gpu",
    *_DEPLOYMENT_KEYS,
)


def _calls(r: _Reader, raw: Mapping[str, Any], where: str, step: str | None) -> tuple[str, ...]:
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


def _step(r: _Reader, raw: Any, where: str, default_model: str, extra_outputs: bool) -> Step:
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
    return Step(
        model=r.get(raw, "model", where, str, default_model),
        function=function,
        step=step,
        outputs=_tensors(r, raw.get("outputs"), f"{where}.outputs"),
        deployments=_deployments(r, raw, where, defaults),
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
    "same_shape_batches",
    "input",
    "output",
    "doc",
    "cpu",
    "torch_gpu",
    *_DEPLOYMENT_KEYS,
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


def _core(r: _Reader, raw: Any, name: str, max_batch_size: int) -> Core:
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
    doc = r.get(raw, "doc", where, str, "")
    if "torch_gpu" in raw and sources["builder"] is None:
        r.problem(
            f"{where}.torch_gpu",
            "a torch.export program (model.pt2) is built only by a builder module of this "
            "repository (make artifacts-gpu); on a GPU without NVIDIA's container serve the "
            "cpu set, or build the plan in NGC's container (make build-plans)",
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
        deployments=_deployments(r, raw, where, core_defaults(max_batch_size, doc)),
        fixed_dims={k: tuple(v) for k, v in fixed.items() if isinstance(v, list)},
        same_shape_batches=r.get(raw, "same_shape_batches", where, bool, False),
        doc=doc,
        inputs=_tensors(r, raw.get("input"), f"{where}.input"),
        outputs=_tensors(r, raw.get("output"), f"{where}.output"),
    )


_TOP_KEYS = (
    "name",
    "summary",
    "doc",
    "max_batch_size",
    "input",
    "output",
    "preprocess",
    "model",
    "postprocess",
    "samples",
    "tests",
    "sequence",
    "session",
    "probe",
)


def _probe(r: _Reader, raw: Any) -> Mapping[str, Any] | None:
    """The ``[probe]`` table: ``inputs`` (KServe v2 JSON input tensors) and optional
    ``outputs``; its format and its tensors are checked by the generator
    (``builders.pipeline.declared``), which writes it as the ``tritonrepo_probe`` parameter."""
    if not isinstance(raw, dict):
        r.problem("probe", "must be a table with inputs = [{ name, datatype, shape, data }]")
        return None
    r.unknown(raw, ("inputs", "outputs"), "probe")
    if not r.get(raw, "inputs", "probe", list, []):
        r.problem("probe.inputs", "is missing or empty; give the request's tensors")
    r.get(raw, "outputs", "probe", list, [])
    return dict(raw)


def parse(data: Mapping[str, Any], source: Path) -> Pipeline:
    """A :class:`Pipeline` from parsed TOML ``data`` (``source``: the file, for messages and
    :attr:`Pipeline.folder`).

    Raises:
        DescriptionError: every structural problem, each naming its field and the fix.
    """
    r = _Reader()
    r.unknown(data, _TOP_KEYS, "")
    name = r.get(data, "name", "", str, "")
    if not NAME_PATTERN.match(name):
        r.problem(
            "name", f"{name!r}: give a lower-case name of letters, digits and _ (a model name)"
        )
    max_batch = r.get(data, "max_batch_size", "", int, DEFAULT_MAX_BATCH_SIZE)
    if max_batch < 0:
        r.problem("max_batch_size", f"{max_batch}: give 1 or more (0: one request = one item, "
                  "no batch dim)")  # fmt: skip
    sequence = session = core_state = None
    if "sequence" in data:
        sequence = parse_sequence(r, data["sequence"])
        session = parse_session(r, data.get("session"), name, REF_PATTERN)
        core_state = parse_core_state(r, data, DTYPES, _tensors, _deployments, NAME_PATTERN,
                                      REF_PATTERN)  # fmt: skip
    elif "session" in data:
        r.problem("session", "needs a [sequence] table (a stateful pipeline); add one or drop it")
    samples = None
    if "samples" in data:
        table = data["samples"]
        if isinstance(table, dict):
            r.unknown(table, ("function",), "samples")
            samples = r.get(table, "function", "samples", str, None)
            if samples is not None and not REF_PATTERN.match(samples):
                r.problem("samples.function", f"{samples!r} is not 'package.module:function'")
        else:
            r.problem("samples", "must be a table with function = 'module:function'")
    if sequence is not None:
        pre = Step("", None, None, session_outputs(data.get("session"), _tensors, r), {})
        post_raw = data.get("postprocess")
        post_raw = {k: v for k, v in post_raw.items() if k == "function"} if isinstance(
            post_raw, dict) else None  # fmt: skip
        if post_raw == {}:
            r.problem("postprocess.function", "is missing; give function = 'module:function'")
        if core_state is not None:  # its step class answers: no postprocess function
            post = Step("", None, None, (), {})
        else:
            post = replace(_step(r, post_raw, "postprocess", "", False), model="", deployments={})
    else:
        pre = _step(r, data.get("preprocess"), "preprocess", f"{name}_preprocess", True)
        post = _step(r, data.get("postprocess"), "postprocess", f"{name}_postprocess", False)
    pipeline = Pipeline(
        name=name,
        summary=r.get(data, "summary", "", str, ""),
        doc=r.get(data, "doc", "", str, ""),
        max_batch_size=max_batch,
        inputs=_tensors(r, data.get("input"), "input"),
        outputs=_tensors(r, data.get("output"), "output"),
        preprocess=pre,
        core=_core(r, data.get("model"), name, max_batch),
        postprocess=post,
        samples=samples,
        tests=r.get(data, "tests", "", bool, True),
        source=source,
        sequence=sequence,
        session=session,
        probe=_probe(r, data["probe"]) if "probe" in data else None,
        core_state=core_state,
    )
    if core_state is not None and session is not None:  # the graph serves under its name
        pipeline = replace(pipeline, core=replace(pipeline.core, model=session.model))
    if sequence is not None:
        check_stateful_tables(r, data, sequence, [t.name for t in pipeline.inputs])
    functions = (pipeline.preprocess.function, pipeline.postprocess.function)
    if max_batch == 0 and (any(functions) or (sequence is not None and core_state is None)):
        r.problem("max_batch_size", "0: give 1 or more for function steps (the generator runs "
                  "them on batches of samples); 0 (one request = one item, no batch dim) is "
                  "for steps that are PythonStep classes (step = 'module:Class')")  # fmt: skip
    if not pipeline.inputs:
        r.problem("input", "no request tensors; add [[input]] tables (name, dtype, dims)")
    if not pipeline.outputs:
        r.problem("output", "no response tensors; add [[output]] tables (name, dtype, dims)")
    names = [m for m in pipeline.models if m]
    if len(set(names)) != len(names):
        r.problem("model", f"the models' names must differ: {names}")
    for model in names if sequence is not None else names[1:]:
        if not NAME_PATTERN.match(model):
            r.problem("model", f"{model!r} is not a valid model name (lower-case, digits, _)")
    for where, step in (("preprocess", pipeline.preprocess), ("postprocess", pipeline.postprocess)):
        for called in step.calls:
            if called in (step.model, pipeline.name):
                what = "its own model" if called == step.model else "its own pipeline"
                r.problem(
                    f"{where}.calls",
                    f"'{called}' is {what}: a step calling itself through BLS never returns; "
                    "call another model",
                )
    if pipeline.samples is None and pipeline.tests:
        r.problem("samples", "is missing; add [samples] function = 'module:function' (the "
                  "health probe, parity, INT8 calibration and the tests use it)")  # fmt: skip
    if r.problems:
        raise DescriptionError(source, r.problems)
    return pipeline


def load(path: Path | str) -> Pipeline:
    """Read and check ``path`` (a ``pipeline.toml``).

    Raises:
        DescriptionError: the file is missing, is not TOML, or has structural problems.
    """
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DescriptionError(
            path, ["no such file; write pipelines/<name>/pipeline.toml"]
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise DescriptionError(path, [f"not valid TOML: {exc}"]) from None
    from tritonrepo.pipelines.graph_description import is_graph, parse_graph

    if is_graph(data):  # [models.<key>] and [[step]]: several core models
        return parse_graph(data, path.resolve())  # type: ignore[return-value]
    return parse(data, path.resolve())


def import_ref(ref: str) -> Callable[..., Any]:
    """The object ``ref`` (``package.module:attribute``) names.

    Raises:
        ImportError: the module cannot be imported (its own error included) or has no such
            attribute.
    """
    module_name, _, attribute = ref.partition(":")
    module = importlib.import_module(module_name)
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ImportError(f"module '{module_name}' has no attribute '{attribute}'") from None


def discover(root: Path) -> list[Path]:
    """The descriptions under ``root`` (``root/<name>/pipeline.toml``), sorted by name."""
    return sorted(root.glob(f"*/{DESCRIPTION_FILE}")) if root.is_dir() else []
