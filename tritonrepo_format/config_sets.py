"""The config sets of this repository, in one table: the name ``--model-config-name`` takes, the
file each model uses, where the core models run and what they need built.

Triton's rule (``--model-config-name``): a model with ``configs/<name>.pbtxt`` uses it, a model
without one uses ``config.pbtxt``. The set of ``config.pbtxt`` is named :data:`DEFAULT_SET`
(``"default"``); ``None`` in a function's ``config_set`` means "no set given", the same files.
A repository may hold sets this table does not know (any ``configs/<name>.pbtxt``):
:func:`config_path` resolves them all; the table says what the known ones need.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DEFAULT_SET = "default"
CPU_SET = "cpu"  # ONNX Runtime on CPU instances: what `make serve` loads
TORCH_GPU_SET = "torch_gpu"  # compiled PyTorch programs on a GPU, without NVIDIA's container
# The same programs (AOTInductor packages) in NVIDIA's container, r26.05 and later: Triton's
# PyTorch backend, platform "torch_aoti"; the steps and ensembles keep their config.pbtxt.
TORCH_AOTI_SET = "torch_aoti"
# Core runtimes that are Triton platforms (the config's ``platform``); the others are backends.
PLATFORMS = ("tensorrt_plan", "torch_aoti")
CONFIG_FOLDER = "configs"
CONFIG_FILE = "config.pbtxt"


@dataclass(frozen=True)
class ConfigSet:
    """One config set.

    Attributes:
        name: what ``--model-config-name`` and ``tritonrepo-client configs use`` take.
        device: ``"gpu"`` or ``"cpu"``, where its core models run.
        core_runtime: the platform or backend of its core models (``tensorrt_plan``,
            ``onnxruntime_python``, ``torch_python``, ``torch_aoti``).
        core_file: the file each core model version loads (``default_model_filename``).
        build: what makes that file: ``make artifacts`` (here), ``make build-plans`` (TensorRT,
            on the serving GPU), ``make artifacts-gpu`` (exported programs, on the GPU host that
            serves them), the builder's ``--format aotinductor`` (AOTInductor packages, with
            the PyTorch of the image that serves them).
        cuda_pool_bytes: CUDA memory pool per GPU the launcher gives Triton for the set (the
            Python backend passes GPU tensors through it), or None for Triton's default.
    """

    name: str
    device: str
    core_runtime: str
    core_file: str
    build: str
    cuda_pool_bytes: int | None = None

    @property
    def file(self) -> str:
        """The config file inside a model folder that uses this set's own config."""
        return set_file(self.name)


CONFIG_SETS: dict[str, ConfigSet] = {
    s.name: s
    for s in (
        ConfigSet(DEFAULT_SET, "gpu", "tensorrt_plan", "model.plan", "make build-plans"),
        ConfigSet(CPU_SET, "cpu", "onnxruntime_python", "model.onnx", "make artifacts"),
        ConfigSet(TORCH_GPU_SET, "gpu", "torch_python", "model.pt2", "make artifacts-gpu", 1 << 30),
        ConfigSet(
            TORCH_AOTI_SET,
            "gpu",
            "torch_aoti",
            "model.pt2",
            "python -m builders.torch_programs.export --format aotinductor",
        ),
    )
}


def set_name(config_set: str | None) -> str:
    """The set's name, :data:`DEFAULT_SET` for None or ``""`` (no ``--model-config-name``)."""
    return config_set or DEFAULT_SET


def set_file(config_set: str | None) -> str:
    """The file, relative to a model folder, that ``config_set`` names: ``config.pbtxt`` for the
    default set, else ``configs/<set>.pbtxt`` (whether or not the model has it)."""
    name = set_name(config_set)
    return CONFIG_FILE if name == DEFAULT_SET else f"{CONFIG_FOLDER}/{name}.pbtxt"


def config_path(repository: Path, model: str, config_set: str | None = None) -> Path:
    """The config Triton uses for ``model`` in ``config_set``: ``configs/<set>.pbtxt`` when the
    model has it, otherwise ``config.pbtxt`` (Triton's ``--model-config-name`` rule)."""
    folder = Path(repository) / model
    named = folder / set_file(config_set)
    return named if named.is_file() else folder / CONFIG_FILE


def sets_in(repository: Path) -> list[str]:
    """The sets a repository holds: the default set, then every ``configs/<name>.pbtxt`` name."""
    named = {p.stem for p in Path(repository).glob(f"*/{CONFIG_FOLDER}/*.pbtxt")}
    return [DEFAULT_SET, *sorted(named - {DEFAULT_SET})]


def unknown_set_message(config_set: str, repository: Path) -> str:
    """Why ``config_set`` is not a set of ``repository``, with the sets it has; ``gpu`` (a name
    for the default set elsewhere, e.g. ``TRITONREPO_CONFIG``) is told its spelling."""
    hint = ""
    if config_set == "gpu":
        hint = f"; the GPU set of config.pbtxt (TensorRT) is spelled '{DEFAULT_SET}'"
    return (
        f"no config set '{config_set}' in {repository}: no model has "
        f"{CONFIG_FOLDER}/{config_set}.pbtxt (sets: {', '.join(sets_in(repository))}){hint}"
    )


def gpu_pool_sizes() -> dict[str, int]:
    """Set name -> CUDA memory pool bytes, for the sets that need one."""
    return {s.name: s.cuda_pool_bytes for s in CONFIG_SETS.values() if s.cuda_pool_bytes}


def cpu_sets() -> tuple[str, ...]:
    """The known sets whose core models run on CPU instances."""
    return tuple(s.name for s in CONFIG_SETS.values() if s.device == "cpu")


def builds() -> dict[str, str]:
    """Core platform/backend -> what builds its files (``make ...``)."""
    return {s.core_runtime: s.build for s in CONFIG_SETS.values()}


__all__ = [
    "CONFIG_SETS",
    "DEFAULT_SET",
    "PLATFORMS",
    "TORCH_AOTI_SET",
    "TORCH_GPU_SET",
    "ConfigSet",
    "builds",
    "config_path",
    "cpu_sets",
    "gpu_pool_sizes",
    "set_file",
    "set_name",
    "sets_in",
    "unknown_set_message",
]
