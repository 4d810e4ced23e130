"""Read model configs into tritonclient's ``ModelConfig`` protobuf, list a repository's models
and ensembles, and check ensembles offline.

Which file a model's config is in for a config set is
:func:`tritonrepo_format.config_sets.config_path`.

``text_format.Parse`` only validates field names, types and enums; :func:`check_ensemble` adds
the graph checks Triton itself performs at load time (sources: Triton's ``ensemble_models.md``
and ``qa/L0_model_config/autofill_noplatform/ensemble/*/expected``), so a broken ensemble fails in
a unit test instead of at server start.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from tritonrepo_format.config_sets import (
    CONFIG_FILE,
    CONFIG_SETS,
    config_path,
    set_name,
)

ModelConfig = mc.ModelConfig


class ConfigParseError(text_format.ParseError):
    """A ``.pbtxt`` that does not parse into ``ModelConfig``, told in one line as compilers do:
    ``<file>:<line>:<column>: <protobuf's reason>``, e.g. ``m/config.pbtxt:8:39: ... Enum type
    "inference.DataType" has no value named TYPE_FP23.``

    A :class:`google.protobuf.text_format.ParseError` (``GetLine``/``GetColumn`` give the place,
    1-based), so code that catches that keeps working.

    Attributes:
        path: the file.
        reason: protobuf's message without its ``line:column :`` prefix.
    """

    def __init__(self, path: Path, line: int | None, column: int | None, reason: str) -> None:
        self.path = Path(path)
        self.reason = reason
        where = ":".join(str(n) for n in (line, column) if n is not None)
        super().__init__(f"{path}:{where}: {reason}" if where else f"{path}: {reason}")
        self._line, self._column = line, column


# The "line:column : " prefix protobuf puts before its reason (text_format.ParseError).
_PLACE = re.compile(r"^\d+(?::\d+)? : ")


def parse_config(text: str, path: Path) -> ModelConfig:
    """Parse ``.pbtxt`` ``text`` read from ``path`` (named in the error).

    Raises:
        ConfigParseError: unknown field, wrong type or bad enum value, with its place.
    """
    try:
        return text_format.Parse(text, ModelConfig())
    except text_format.ParseError as exc:
        reason = _PLACE.sub("", str(exc))
        raise ConfigParseError(path, exc.GetLine(), exc.GetColumn(), reason) from None


def load_config(path: Path) -> ModelConfig:
    """Parse a ``.pbtxt`` file.

    Raises:
        ConfigParseError: unknown field, wrong type or bad enum value; the message is one line,
            ``<file>:<line>:<column>: <reason>`` (a ``text_format.ParseError``).
        FileNotFoundError: no such file.
    """
    return parse_config(Path(path).read_text(), Path(path))


def all_config_files(repository: Path) -> list[Path]:
    """Every ``config.pbtxt`` and ``configs/*.pbtxt`` in the repository."""
    return sorted([*repository.glob("*/config.pbtxt"), *repository.glob("*/configs/*.pbtxt")])


def model_names(repository: Path) -> list[str]:
    """The models of a repository: its folders with a ``config.pbtxt``, by name."""
    return sorted(p.parent.name for p in Path(repository).glob(f"*/{CONFIG_FILE}"))


def read_config(repository: Path, model: str, config_set: str | None = None) -> ModelConfig:
    """``model``'s config in ``config_set`` (None: the default set), as Triton resolves it.

    Raises:
        ConfigParseError: the file does not parse.
        FileNotFoundError: the model has no config.pbtxt.
    """
    return load_config(config_path(Path(repository), model, config_set))


def models_where(
    repository: Path, config_set: str | None, keep: Callable[[ModelConfig], bool]
) -> list[str]:
    """The models of ``repository`` whose config in ``config_set`` satisfies ``keep``, by name;
    a model whose config does not parse is left out (the preflight reports it)."""
    names = []
    for model in model_names(repository):
        try:
            config = read_config(repository, model, config_set)
        except text_format.ParseError:
            continue
        if keep(config):
            names.append(model)
    return names


def core_runtime_models(repository: Path, config_set: str | None = None) -> list[str]:
    """The models whose config in ``config_set`` (a set of the table) runs on the set's core
    runtime (``tensorrt_plan``, ``onnxruntime_python``, ``torch_python``), by name: the models
    whose files that set's build makes (TensorRT plans, ONNX files, ``torch.export`` programs).

    Raises:
        KeyError: ``config_set`` is not in the table of config sets.
    """
    runtime = CONFIG_SETS[set_name(config_set)].core_runtime
    return models_where(repository, config_set, lambda c: runtime in (c.platform, c.backend))


def ensembles(repository: Path, config_set: str | None = None) -> list[str]:
    """The ensembles of ``repository`` (platform ``ensemble``) in ``config_set``, by name."""
    return models_where(repository, config_set, lambda c: c.platform == "ensemble")


def ensemble_steps(config: ModelConfig) -> list[str]:
    """The step models of an ensemble config, in its order (empty for any other model)."""
    return [step.model_name for step in config.ensemble_scheduling.step]


@dataclass(frozen=True)
class TensorSpec:
    """A tensor as a model config declares it: data type and dims (without the batch dim)."""

    data_type: int
    dims: tuple[int, ...]
    batched: bool

    def describe(self) -> str:
        """e.g. ``TYPE_FP32 [batch, -1, 384]``."""
        dims = (["batch"] if self.batched else []) + [str(d) for d in self.dims]
        return f"{mc.DataType.Name(self.data_type)} [{', '.join(dims)}]"

    @property
    def full_dims(self) -> tuple[int, ...]:
        """The tensor's whole shape, the batch dimension as -1."""
        return ((-1,) if self.batched else ()) + self.dims

    def compatible(self, other: TensorSpec) -> bool:
        """Same type and rank of the whole shape, equal dims where neither is -1.

        A batched tensor may feed a model without batching and vice versa (Triton then reads
        the first dimension as the batch: e.g. ``input_ids`` [-1, 64] from a per-user step
        reaches a batching model as a request of batch n); the shapes must still agree.
        """
        mine, theirs = self.full_dims, other.full_dims
        return (
            self.data_type == other.data_type
            and len(mine) == len(theirs)
            and all(a == b or -1 in (a, b) for a, b in zip(mine, theirs, strict=True))
        )


def tensor_specs(tensors, batched: bool) -> dict[str, TensorSpec]:
    """Tensor name -> :class:`TensorSpec` of a config's ``input`` or ``output`` list."""
    return {t.name: TensorSpec(t.data_type, tuple(t.dims), batched) for t in tensors}


def check_ensemble(repository: Path, ensemble: str, config_name: str | None = None) -> list[str]:
    """Problems of ensemble ``ensemble`` with every step config resolved as Triton would.

    Checks: platform/backend/instance_group of the ensemble; each step model exists; input_map
    keys are step inputs and cover its required inputs; output_map keys are step outputs; each
    ensemble tensor has exactly one producer and is produced before it is consumed (no cycles);
    data types and dims agree across each step, including the batch dimension; the ensemble's
    ``max_batch_size`` is ≤ every step's.

    A set may serve the pipeline as one model instead (the ``cpu`` set of a described
    pipeline: ``configs/cpu.pbtxt`` with ``backend: "python"``); then the ensemble of
    ``config.pbtxt`` is checked with its steps resolved in that set, as a load-API override
    would load it.

    Returns:
        Human-readable problems; empty when the ensemble is consistent.
    """
    cfg = load_config(config_path(repository, ensemble, config_name))
    if cfg.platform != "ensemble" and cfg.backend == "python" and config_name:
        cfg = load_config(config_path(repository, ensemble))
    problems: list[str] = []
    if cfg.platform != "ensemble" or cfg.backend:
        problems.append(f"{ensemble}: must have platform 'ensemble' and no backend")
    if len(cfg.instance_group):
        problems.append(f"{ensemble}: instance group should not be specified for ensemble")
    if len(cfg.model_warmup):
        problems.append(f"{ensemble}: model_warmup can not be specified for ensemble")
    batched = cfg.max_batch_size > 0
    available = tensor_specs(cfg.input, batched)  # tensor name -> spec, as produced so far
    producers: dict[str, str] = {name: "ensemble input" for name in available}
    steps = list(cfg.ensemble_scheduling.step)
    if not steps:
        problems.append(f"{ensemble}: ensemble_scheduling has no step")

    step_io = []
    for step in steps:
        path = config_path(repository, step.model_name, config_name)
        if not path.is_file():
            problems.append(f"{ensemble}: step model '{step.model_name}' not in the repository")
            continue
        step_cfg = load_config(path)
        if step_cfg.max_batch_size < cfg.max_batch_size:
            problems.append(
                f"{ensemble}: max_batch_size {cfg.max_batch_size} exceeds step "
                f"'{step.model_name}' max_batch_size {step_cfg.max_batch_size}"
            )
        step_batched = step_cfg.max_batch_size > 0
        inputs = tensor_specs(step_cfg.input, step_batched)
        outputs = tensor_specs(step_cfg.output, step_batched)
        for key in step.input_map:
            if key not in inputs:
                problems.append(f"{ensemble}: '{key}' is not an input of '{step.model_name}'")
        for spec in step_cfg.input:
            if spec.name not in step.input_map and not spec.optional:
                problems.append(
                    f"{ensemble}: required input '{spec.name}' of '{step.model_name}' is not mapped"
                )
        for key, tensor in step.output_map.items():
            if key not in outputs:
                problems.append(f"{ensemble}: '{key}' is not an output of '{step.model_name}'")
            elif tensor in producers:
                problems.append(
                    f"{ensemble}: tensor '{tensor}' is produced by both {producers[tensor]} "
                    f"and '{step.model_name}'"
                )
            else:
                producers[tensor] = f"'{step.model_name}'"
        step_io.append((step, inputs, outputs))

    # Schedule steps by data availability, as Triton does; what never becomes runnable
    # consumes a tensor that is never produced (or sits on a cycle).
    pending = list(step_io)
    while pending:
        runnable = [s for s in pending if all(t in available for t in s[0].input_map.values())]
        if not runnable:
            for step, _, _ in pending:
                missing = sorted(t for t in step.input_map.values() if t not in available)
                problems.append(
                    f"{ensemble}: step '{step.model_name}' consumes {missing}, which no earlier "
                    f"step produces"
                )
            break
        for step, inputs, outputs in runnable:
            for key, tensor in step.input_map.items():
                if key in inputs and not available[tensor].compatible(inputs[key]):
                    problems.append(
                        f"{ensemble}: tensor '{tensor}' is {available[tensor].describe()} but "
                        f"'{step.model_name}' input '{key}' expects {inputs[key].describe()}"
                    )
            for key, tensor in step.output_map.items():
                if key in outputs:
                    available[tensor] = outputs[key]
            pending.remove((step, inputs, outputs))

    for name, spec in tensor_specs(cfg.output, batched).items():
        if name not in available:
            problems.append(f"{ensemble}: output '{name}' is produced by no step")
        elif not available[name].compatible(spec):
            problems.append(
                f"{ensemble}: output '{name}' is declared {spec.describe()} but its step "
                f"produces {available[name].describe()}"
            )
    return problems
