"""What a TensorRT plan must look like to serve under its GPU ``config.pbtxt``, and the checks.

A plan's I/O (name, data type, shape) and optimization profile are fixed when it is built; the
config is written by hand. They must agree, or Triton refuses to load the model (or, worse,
serves a batch size the engine was not built for). This module derives both sides from one
source and compares them, without TensorRT:

* :func:`config_tensors` maps tensors ``(name, dtype, shape)`` — an engine's I/O, or an ONNX
  graph's (:func:`onnx_io`) — to the config ``input``/``output`` entries Triton expects: the data
  type from the tensor itself (never from the build precision: an FP16 build of an FP32 graph
  keeps FP32 I/O, INT64 ids stay INT64 on TensorRT 10 with Triton >= 24.05), the batch dimension
  dropped when ``max_batch_size > 0``.
* :func:`check_config` compares a config with those tensors, including the sequence batcher's
  state tensors and control inputs, and returns readable problems.
* :func:`model_profile` derives optimization profile 0 from the config's ``max_batch_size``
  and the model's spec (``tritonrepo/text/spec.py`` and ``tritonrepo/ctr/spec.py`` ``PROFILE``),
  and fails if the spec and the config disagree; :func:`check_profile` checks a profile against
  the tensors.

Sources for Triton's rules: tensorrt_backend ``src/instance_state.cc`` (``ValidateIO``,
``InitializeExecuteInputBinding``: an engine dtype must equal the config's, control inputs are
shape ``[1]`` per batch item, state tensors are bound by ``input_name``/``output_name``) and
``src/tensorrt_utils.cc`` (``ConvertTrtTypeToDataType``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from builders.pipeline.plan_data import described_plan_models
from tritonrepo.ctr import spec as ctr_spec
from tritonrepo.image import spec as image_spec
from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.text import spec as text_spec
from tritonrepo_format.config_sets import DEFAULT_SET
from tritonrepo_format.configs import core_runtime_models
from tritonrepo_format.dtypes import CONFIG_NAMES_BY_NUMPY

if TYPE_CHECKING:  # tritonclient's protobuf; imported by the caller that parses the config
    from tritonrepo_format.configs import ModelConfig

# The models with a TensorRT plan (config.pbtxt with platform "tensorrt_plan") that this module
# profiles: all but the described cores that builders.pipeline.plan_data builds (their plans:
# builders.tensorrt.plans.described_plan_models).
PLAN_MODELS = tuple(
    m
    for m in core_runtime_models(MODEL_REPOSITORY, DEFAULT_SET)
    if m not in described_plan_models()
)

# Tensor data types by numpy-style name -> Triton config type. Engine types are named the same
# way (``tensorrt_plans.engine_io``); TensorRT's FP8 and INT4 have no Triton type.
TRITON_TYPES = CONFIG_NAMES_BY_NUMPY

Shape = tuple[int, ...]
Profile = dict[str, tuple[Shape, Shape, Shape]]  # input name -> (min, opt, max)


@dataclass(frozen=True)
class IOTensor:
    """One input or output of an engine or ONNX graph.

    Attributes:
        name: tensor name.
        dtype: numpy-style type name (``"float32"``, ``"float16"``, ``"int64"``, ...; see
            ``TRITON_TYPES``), or the runtime's own name when it has no numpy equivalent.
        shape: full shape, batch dimension included; ``-1`` for a dynamic dimension.
        is_input: ``True`` for an input.
    """

    name: str
    dtype: str
    shape: Shape
    is_input: bool


@dataclass(frozen=True)
class ConfigTensor:
    """A config ``input``/``output`` entry: ``data_type`` (``"TYPE_INT64"``) and ``dims``
    without the batch dimension."""

    name: str
    data_type: str
    dims: Shape

    def pbtxt(self) -> str:
        """The entry as ``config.pbtxt`` writes it, e.g.
        ``{ name: "ctr" data_type: TYPE_FP32 dims: [ 1 ] }``."""
        dims = ", ".join(str(d) for d in self.dims)
        return f'{{ name: "{self.name}" data_type: {self.data_type} dims: [ {dims} ] }}'


def config_tensors(
    tensors: Iterable[IOTensor], max_batch_size: int, exclude: Iterable[str] = ()
) -> tuple[list[ConfigTensor], list[ConfigTensor]]:
    """Config ``input`` and ``output`` entries for ``tensors``.

    Args:
        tensors: the engine's (or ONNX graph's) I/O.
        max_batch_size: the config's; when > 0 every tensor's first dimension is the batch
            and is dropped from ``dims``.
        exclude: names that are not config inputs/outputs (state tensors, control inputs).

    Returns:
        ``(inputs, outputs)`` in the order of ``tensors``.

    Raises:
        ValueError: a dtype without a Triton type (e.g. TensorRT FP8), or, for a batching model,
            a tensor whose first dimension is not dynamic (-1): such an engine cannot take the
            batches the config allows.
    """
    skip = set(exclude)
    inputs: list[ConfigTensor] = []
    outputs: list[ConfigTensor] = []
    for t in tensors:
        if t.name in skip:
            continue
        if t.dtype not in TRITON_TYPES:
            raise ValueError(f"tensor '{t.name}' has type {t.dtype}, which Triton cannot serve")
        dims = tuple(t.shape)
        if max_batch_size > 0:
            if not dims or dims[0] != -1:
                raise ValueError(
                    f"tensor '{t.name}' has shape {list(dims)}: with max_batch_size "
                    f"{max_batch_size} its first dimension must be the dynamic batch (-1)"
                )
            dims = dims[1:]
        (inputs if t.is_input else outputs).append(
            ConfigTensor(t.name, TRITON_TYPES[t.dtype], dims)
        )
    return inputs, outputs


def _type_name(cfg: ModelConfig, value: int) -> str:
    """Name of a ``DataType`` enum value (``TYPE_INT64``), from ``cfg``'s own descriptor."""
    return cfg.DESCRIPTOR.file.enum_types_by_name["DataType"].values_by_number[value].name


def _control_type(cfg: ModelConfig, control) -> str:
    """Config data type of a sequence control input (``int32_false_true`` -> TYPE_INT32 ...)."""
    if control.int32_false_true:
        return "TYPE_INT32"
    if control.fp32_false_true:
        return "TYPE_FP32"
    if control.bool_false_true:
        return "TYPE_BOOL"
    return _type_name(cfg, control.data_type)  # CONTROL_SEQUENCE_CORRID


def sequence_tensors(cfg: ModelConfig) -> dict[str, tuple[str, Shape, bool]]:
    """State and control tensors of ``cfg``'s sequence batcher, as the engine must have them.

    Returns:
        name -> ``(data_type, full engine shape, is_input)``: state inputs/outputs with the
        state's ``dims`` (batch dim -1 first when ``max_batch_size > 0``), control inputs with
        shape ``[1]`` (``[-1, 1]`` when batching).
    """
    if not cfg.HasField("sequence_batching"):
        return {}
    batch = (-1,) if cfg.max_batch_size > 0 else ()
    found: dict[str, tuple[str, Shape, bool]] = {}
    for state in cfg.sequence_batching.state:
        dtype, dims = _type_name(cfg, state.data_type), (*batch, *state.dims)
        found[state.input_name] = (dtype, dims, True)
        found[state.output_name] = (dtype, dims, False)
    for control_input in cfg.sequence_batching.control_input:
        for control in control_input.control:
            found[control_input.name] = (_control_type(cfg, control), (*batch, 1), True)
    return found


def _model_dims(tensor) -> Shape:
    """A config tensor's dims as the model sees them: ``reshape.shape`` when it has one."""
    return tuple(tensor.reshape.shape) if tensor.HasField("reshape") else tuple(tensor.dims)


def check_config(cfg: ModelConfig, tensors: Sequence[IOTensor]) -> list[str]:
    """Where ``cfg`` (a GPU ``config.pbtxt``) and an engine's or graph's I/O disagree.

    Checks every config input/output against :func:`config_tensors` (name, data type, dims),
    every state tensor and control input of the sequence batcher (present, direction, type,
    shape), that no engine tensor is left unbound, and, with more than one state, that the
    states pair up the same way when input and output names are sorted (Triton pairs them in
    sorted order).

    Args:
        cfg: the parsed config (``tritonrepo_format.configs.load_config``).
        tensors: the engine's or ONNX graph's I/O.

    Returns:
        Problems, one readable sentence each, quoting the entry the config should have; empty
        when they agree.
    """
    problems: list[str] = []
    by_name = {t.name: t for t in tensors}
    sequence = sequence_tensors(cfg)
    try:
        want_in, want_out = config_tensors(tensors, cfg.max_batch_size, exclude=sequence)
    except ValueError as exc:
        return [str(exc)]
    for kind, want, declared in (("input", want_in, cfg.input), ("output", want_out, cfg.output)):
        have = {t.name: ConfigTensor(t.name, _type_name(cfg, t.data_type), _model_dims(t))
                for t in declared}  # fmt: skip
        for entry in want:
            if entry.name not in have:
                problems.append(f"the engine has {kind} {entry.pbtxt()}, the config does not")
            elif have[entry.name] != entry:
                problems.append(
                    f"{kind} '{entry.name}': the config says {have[entry.name].pbtxt()}, the "
                    f"engine has {entry.pbtxt()}"
                )
        for name in have.keys() - {e.name for e in want}:
            problems.append(f"config {kind} '{name}' is not a model {kind} of the engine")
    for name, (dtype, shape, is_input) in sequence.items():
        role = "state/control input" if is_input else "state output"
        t = by_name.get(name)
        if t is None:
            problems.append(f"{role} '{name}' of sequence_batching is not in the engine")
        elif t.is_input != is_input:
            problems.append(f"'{name}' must be an engine {'input' if is_input else 'output'}")
        elif TRITON_TYPES.get(t.dtype) != dtype or tuple(t.shape) != shape:
            problems.append(
                f"{role} '{name}': sequence_batching needs {dtype} {list(shape)}, the engine has "
                f"{TRITON_TYPES.get(t.dtype, t.dtype)} {list(t.shape)}"
            )
    states = list(cfg.sequence_batching.state) if cfg.HasField("sequence_batching") else []
    if len(states) > 1:
        by_input = [s.output_name for s in sorted(states, key=lambda s: s.input_name)]
        if by_input != sorted(s.output_name for s in states):
            problems.append(
                "state input and output names do not sort in the same order (Triton pairs them "
                f"by sorted name): inputs {sorted(s.input_name for s in states)}, outputs "
                f"{sorted(s.output_name for s in states)}"
            )
    return problems


def onnx_io(path: Path) -> list[IOTensor]:
    """The inputs and outputs of an ONNX graph; symbolic or unknown dimensions become -1.

    Raises:
        FileNotFoundError: no such file.
        ValueError: a tensor whose element type has no numpy-style name here.
    """
    import onnx

    names = {
        onnx.TensorProto.BOOL: "bool",
        onnx.TensorProto.UINT8: "uint8",
        onnx.TensorProto.INT8: "int8",
        onnx.TensorProto.INT32: "int32",
        onnx.TensorProto.INT64: "int64",
        onnx.TensorProto.FLOAT16: "float16",
        onnx.TensorProto.BFLOAT16: "bfloat16",
        onnx.TensorProto.FLOAT: "float32",
        onnx.TensorProto.DOUBLE: "float64",
    }
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path} is missing; build it with `make artifacts`")
    graph = onnx.load(str(path), load_external_data=False).graph
    initializers = {i.name for i in graph.initializer}
    tensors = []
    for values, is_input in ((graph.input, True), (graph.output, False)):
        for v in values:
            if v.name in initializers:
                continue
            elem = v.type.tensor_type.elem_type
            if elem not in names:
                raise ValueError(f"{path}: tensor '{v.name}' has ONNX element type {elem}")
            shape = tuple(
                d.dim_value if d.HasField("dim_value") else -1 for d in v.type.tensor_type.shape.dim
            )
            tensors.append(IOTensor(v.name, names[elem], shape, is_input))
    return tensors


def model_profile(model: str, cfg: ModelConfig) -> Profile:
    """Optimization profile 0 of ``model``'s plan, from its config and spec.

    * ``text_embedding_encoder``: ``input_ids``/``attention_mask`` ``[batch, seq]``, batch
      1..``max_batch_size``, seq 1..256 (``text_spec.MAX_SEQ_LENGTH``), opt from
      ``text_spec.PROFILE`` ([16, 128]).
    * ``ctr_model``: ``input_ids`` ``[batch, 64]``, batch 1..``max_batch_size``, opt from
      ``ctr_spec.PROFILE`` (32, the largest preferred batch size).
    * ``ctr_session`` (``max_batch_size`` 0): ``CANDIDATES`` ``[n]``, n 1..512
      (``ctr_spec.MAX_CANDIDATES``), opt the ctr_model opt batch (32 candidates); its other
      inputs have fixed shapes and need no profile entry.
    * ``image_classifier`` and ``image_classifier_resnet50``: ``pixels`` ``[batch, 3, 224, 224]``,
      batch 1..``max_batch_size``, opt from ``image_spec.PROFILE`` (16).

    Returns:
        input name -> ``(min, opt, max)`` shapes.

    Raises:
        ValueError: the spec's ``PROFILE`` disagrees with the config (its max batch is not the
            config's ``max_batch_size``, or batching is on/off against the model's design), or
            the model has no plan.
    """
    if model == text_spec.ENCODER_MODEL:
        spec_profile, max_seq = text_spec.PROFILE, text_spec.MAX_SEQ_LENGTH
        derived = {
            name: ((1, 1), opt, (cfg.max_batch_size, max_seq))
            for name, (_lo, opt, _hi) in spec_profile.items()
        }
    elif model == ctr_spec.CORE_MODEL:
        spec_profile, seq = ctr_spec.PROFILE, ctr_spec.SEQ_LENGTH
        derived = {
            name: ((1, seq), opt, (cfg.max_batch_size, seq))
            for name, (_lo, opt, _hi) in spec_profile.items()
        }
    elif model == ctr_spec.SESSION_MODEL:
        if cfg.max_batch_size != 0:
            raise ValueError(
                f"{model}: max_batch_size must be 0 (one session event per execution), "
                f"got {cfg.max_batch_size}"
            )
        opt = ctr_spec.PROFILE[ctr_spec.CORE_INPUT][1][0]
        return {"CANDIDATES": ((1,), (opt,), (ctr_spec.MAX_CANDIDATES,))}
    elif model in (image_spec.CORE_MODEL, image_spec.RESNET50_MODEL):
        spec_profile = image_spec.PROFILE
        derived = {
            name: ((1, *lo[1:]), opt, (cfg.max_batch_size, *hi[1:]))
            for name, (lo, opt, hi) in spec_profile.items()
        }
    else:
        raise ValueError(f"{model} has no TensorRT plan; plan models: {', '.join(PLAN_MODELS)}")
    if cfg.max_batch_size <= 0:
        raise ValueError(f"{model}: the config must batch (max_batch_size > 0)")
    if derived != spec_profile:
        raise ValueError(
            f"{model}: the spec's PROFILE {spec_profile} disagrees with config.pbtxt "
            f"(max_batch_size {cfg.max_batch_size}); expected {derived}"
        )
    return derived


def check_profile(profile: Profile, tensors: Sequence[IOTensor], cfg: ModelConfig) -> list[str]:
    """Where a profile does not fit the tensors and config.

    Checks: every profile entry names an input and has its rank; fixed dimensions have
    min = opt = max = that size; min <= opt <= max and min >= 1; every input with a dynamic
    dimension has an entry; with ``max_batch_size > 0`` the batch range is 1..max_batch_size.

    Returns:
        Problems, one sentence each; empty when the profile fits.
    """
    problems: list[str] = []
    inputs = {t.name: t for t in tensors if t.is_input}
    for name, (lo, opt, hi) in profile.items():
        t = inputs.get(name)
        if t is None:
            problems.append(f"profile input '{name}' is not an input of the engine")
            continue
        if not len(lo) == len(opt) == len(hi) == len(t.shape):
            problems.append(f"profile '{name}' {lo}/{opt}/{hi} does not have rank {len(t.shape)}")
            continue
        for axis, (dim, a, b, c) in enumerate(zip(t.shape, lo, opt, hi, strict=True)):
            if not 1 <= a <= b <= c:
                problems.append(f"profile '{name}' axis {axis}: need 1 <= min <= opt <= max")
            if dim != -1 and not a == b == c == dim:
                problems.append(f"profile '{name}' axis {axis} must be {dim} (fixed), got {a}..{c}")
        if cfg.max_batch_size > 0 and (lo[0], hi[0]) != (1, cfg.max_batch_size):
            problems.append(
                f"profile '{name}' batch {lo[0]}..{hi[0]} must be 1..{cfg.max_batch_size} "
                "(the config's max_batch_size)"
            )
    for name, t in inputs.items():
        if -1 in t.shape and name not in profile:
            problems.append(f"input '{name}' {list(t.shape)} is dynamic but has no profile entry")
    return problems


def profile_json(profile: Profile) -> dict[str, dict[str, list[int]]]:
    """``{input: {"min": [...], "opt": [...], "max": [...]}}`` for ``plan_metadata.json``."""
    return {
        name: {"min": list(lo), "opt": list(opt), "max": list(hi)}
        for name, (lo, opt, hi) in profile.items()
    }
