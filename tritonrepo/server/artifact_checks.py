"""Per-model artifact checks of :mod:`tritonrepo.server.preflight`: files, build metadata against
this host, and config interfaces against ONNX graphs.

A :class:`Finding` is ``"error"`` (the server would fail), ``"skipped"`` (this host lacks a GPU,
TensorRT or PyTorch to compare with) or ``"ok"``. :func:`model_artifacts` lists the files a
model's served versions need, each with what makes it (:class:`Artifact`); :func:`check_model`
checks exactly those, and ``builders/gpu_sources.py`` packs them for an offline GPU host.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from functools import cache
from pathlib import Path, PurePosixPath

from tritonrepo_format.config_sets import CONFIG_SETS, DEFAULT_SET, TORCH_GPU_SET, config_path
from tritonrepo_format.config_sets import builds as config_set_builds
from tritonrepo_format.configs import (
    ModelConfig,
    check_ensemble,
    load_config,
    mc,
)
from tritonrepo_format.dtypes import CONFIG_VALUES_BY_ONNX

# Python-based backends of this repository (backends/<name>/model.py) and Triton's own.
PYTHON_BACKENDS = {"python", "onnxruntime_python", "torch_python"}
# Platform/backend -> the file a version loads: the config sets' core models, and Triton's own
# ONNX Runtime backend.
DEFAULT_FILENAMES = {
    **{s.core_runtime: s.core_file for s in CONFIG_SETS.values()},
    "onnxruntime": "model.onnx",
}
# Backends and platforms a model here may name: this repository's Python-based backends and the
# ones NVIDIA's container ships for the formats the builders write.
KNOWN_BACKENDS = PYTHON_BACKENDS | {"tensorrt_plan", "tensorrt", "onnxruntime", "pytorch"}
# What makes a required file (Artifact.build): in git, or the make target that writes it.
TRACKED = "tracked"
MAKE_ARTIFACTS = CONFIG_SETS["cpu"].build  # builders/*_onnx.py here, from the source weights
MAKE_ARTIFACTS_GPU = CONFIG_SETS[TORCH_GPU_SET].build  # torch.export on the GPU host that serves
MAKE_BUILD_PLANS = CONFIG_SETS[DEFAULT_SET].build  # TensorRT, in NVIDIA's builder container
BUILDS = config_set_builds()  # core platform/backend -> its build; any other: MAKE_ARTIFACTS
# onnx.TensorProto.DataType value -> Triton config data type.
ONNX_TYPES = CONFIG_VALUES_BY_ONNX


@dataclass(frozen=True)
class Finding:
    """One result: ``level`` is ``"error"`` (the server would fail), ``"skipped"`` (this host
    cannot check it) or ``"ok"``."""

    level: str
    model: str
    message: str

    def line(self) -> str:
        """e.g. ``error   text_embedding_encoder: 1/model.onnx is missing; ...``."""
        return f"{self.level:<8}{self.model}: {self.message}"


@dataclass(frozen=True)
class Artifact:
    """One file a model needs, as :func:`check_model` checks it.

    Attributes:
        model: the model folder's name.
        version: the served version whose folder holds it; None for the model's config.
        path: relative to the model repository, e.g. ``ctr_model/1/model.pt2``.
        role: ``"config"``, ``"model"`` (``model.py`` or the ``default_model_filename``),
            ``"tokenizer_file"``, ``"labels_file"`` (the parameters a Python step reads),
            ``"plan_metadata"`` or ``"torch_metadata"``.
        build: :data:`TRACKED` or the make target that writes it (``MAKE_*``).
    """

    model: str
    version: int | None
    path: PurePosixPath
    role: str
    build: str


def model_artifacts(repository: Path, model: str, cfg: ModelConfig) -> list[Artifact]:
    """The files ``model``'s served versions need under ``cfg`` (none for an ensemble or an
    unknown backend: :func:`check_model` reports those otherwise), per version in the order
    :func:`check_model` checks them, the ``"model"`` file first."""
    kind = cfg.platform or cfg.backend
    if cfg.platform == "ensemble" or kind not in KNOWN_BACKENDS:
        return []
    build = BUILDS.get(kind, MAKE_ARTIFACTS)
    artifacts = []
    for version in served_versions(repository, cfg):
        base = PurePosixPath(model, str(version))
        if kind == "python":
            artifacts.append(Artifact(model, version, base / "model.py", "model", TRACKED))
        else:
            name = cfg.default_model_filename or DEFAULT_FILENAMES.get(kind, "model")
            artifacts.append(Artifact(model, version, base / name, "model", build))
        for key in ("tokenizer_file", "labels_file"):  # built files a Python step reads
            built = cfg.parameters.get(key)
            if built:
                path = base / built.string_value
                artifacts.append(Artifact(model, version, path, key, MAKE_ARTIFACTS))
        if kind == "tensorrt_plan":
            path = base / "plan_metadata.json"
            artifacts.append(Artifact(model, version, path, "plan_metadata", MAKE_BUILD_PLANS))
        if kind == "torch_python":
            from tritonrepo.runners.torch_runner import METADATA_FILE

            path = base / METADATA_FILE
            artifacts.append(Artifact(model, version, path, "torch_metadata", MAKE_ARTIFACTS_GPU))
    return artifacts


def served_versions(repository: Path, cfg: ModelConfig) -> list[int]:
    """The versions Triton would load: ``specific`` ones, else the latest (the default policy
    ``latest { num_versions: 1 }``) or all."""
    on_disk = sorted(
        int(p.name)
        for p in (repository / cfg.name).iterdir()
        if p.is_dir() and p.name.isdigit() and not p.name.startswith("0")
    )
    policy = cfg.version_policy
    if policy.HasField("specific"):
        return list(policy.specific.versions)
    if policy.HasField("all"):
        return on_disk
    count = policy.latest.num_versions if policy.HasField("latest") else 1
    return on_disk[-count:]


@cache
def gpu_facts() -> tuple[str, str] | None:
    """``(name, compute capability)`` of GPU 0 from ``nvidia-smi``, None without a GPU."""
    if not shutil.which("nvidia-smi"):
        return None
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if out.returncode != 0 or not out.stdout.strip():
        return None
    name, capability = (part.strip() for part in out.stdout.splitlines()[0].split(","))
    return name, capability


def module_version(name: str) -> str | None:
    """``<module>.__version__`` if the module imports, else None."""
    try:
        module = __import__(name)
    except ImportError:
        return None
    return str(module.__version__)


def check_model(repository: Path, model: str, config_name: str | None) -> list[Finding]:
    """Every check above for one model (see the module docstring)."""
    path = config_path(repository, model, config_name)
    if not path.is_file():
        return [Finding("error", model, f"no {path.relative_to(repository)} in the repository")]
    try:
        cfg = load_config(path)
    except Exception as exc:
        return [Finding("error", model, f"{path.relative_to(repository)} does not parse: {exc}")]
    if cfg.platform == "ensemble":
        problems = check_ensemble(repository, model, config_name)
        return [Finding("error", model, p) for p in problems] or [
            Finding("ok", model, f"ensemble of {len(cfg.ensemble_scheduling.step)} steps")
        ]
    kind = cfg.platform or cfg.backend
    if kind not in KNOWN_BACKENDS:
        return [
            Finding(
                "error",
                model,
                f"backend '{kind}' is unknown (known: {', '.join(sorted(KNOWN_BACKENDS))})",
            )
        ]
    findings = []
    versions = served_versions(repository, cfg)
    if not versions:
        findings.append(Finding("error", model, "no version folder to serve"))
    artifacts = model_artifacts(repository, model, cfg)
    for version in versions:
        folder = repository / model / str(version)
        needed = {a.role: a for a in artifacts if a.version == version}
        main = needed.pop("model")
        if not (repository / main.path).is_file():
            fix = "" if main.build == TRACKED else f"; build it with `{main.build}`"
            where = main.path.relative_to(model)
            findings.append(Finding("error", model, f"{where} is missing{fix}"))
            continue
        for key in ("tokenizer_file", "labels_file"):
            built = needed.get(key)
            if built and not (repository / built.path).is_file():
                where = built.path.relative_to(model)
                findings.append(
                    Finding("error", model, f"{where} is missing; build it with `{built.build}`")
                )
        if "plan_metadata" in needed:
            findings += _check_plan(cfg, repository / needed["plan_metadata"].path)
        if "torch_metadata" in needed:
            findings += _check_program(cfg, repository / needed["torch_metadata"].path)
        onnx_file = folder / "model.onnx"
        if kind in ("tensorrt_plan", "onnxruntime_python", "onnxruntime") and onnx_file.is_file():
            findings += _check_onnx_interface(cfg, onnx_file, compare_types=True)
    if not any(f.level == "error" for f in findings):
        findings.append(Finding("ok", model, f"{kind}, versions {versions}"))
    return findings


def _check_plan(cfg: ModelConfig, metadata_file: Path) -> list[Finding]:
    """The plan's ``plan_metadata.json`` against ``max_batch_size``, this GPU and TensorRT."""
    folder = metadata_file.parent
    if not metadata_file.is_file():
        return [
            Finding(
                "error",
                cfg.name,
                f"{folder.name}/plan_metadata.json is missing: "
                "rebuild the plan with `make build-plans`",
            )
        ]
    metadata = json.loads(metadata_file.read_text())
    findings = []
    for profile in metadata.get("profiles", []):
        for name, shapes in profile.items():
            if cfg.max_batch_size and shapes["max"][0] < cfg.max_batch_size:
                findings.append(
                    Finding(
                        "error",
                        cfg.name,
                        f"plan profile of '{name}' ends at "
                        f"batch {shapes['max'][0]} < max_batch_size "
                        f"{cfg.max_batch_size}",
                    )
                )
    gpu = gpu_facts()
    if gpu is None:
        findings.append(
            Finding(
                "skipped", cfg.name, "no GPU visible (nvidia-smi): the plan's GPU was not compared"
            )
        )
    elif metadata.get("compute_capability") != gpu[1]:
        findings.append(
            Finding(
                "error",
                cfg.name,
                f"{folder.name}/model.plan was built for "
                f"{metadata.get('gpu_name')} (compute capability "
                f"{metadata.get('compute_capability')}); this GPU is {gpu[0]} "
                f"({gpu[1]}): rebuild it here with `make build-plans`",
            )
        )
    trt = module_version("tensorrt")
    if trt is None:
        findings.append(
            Finding(
                "skipped",
                cfg.name,
                "TensorRT's Python module is not installed: "
                "the plan's TensorRT version was not compared",
            )
        )
    elif metadata.get("tensorrt_version") != trt:
        findings.append(
            Finding(
                "error",
                cfg.name,
                f"{folder.name}/model.plan was built with "
                f"TensorRT {metadata.get('tensorrt_version')}; this host has "
                f"{trt}: rebuild it with `make build-plans`",
            )
        )
    return findings


def _check_program(cfg: ModelConfig, metadata_file: Path) -> list[Finding]:
    """The program's ``torch_metadata.json`` against ``max_batch_size`` and this PyTorch."""
    folder = metadata_file.parent
    if not metadata_file.is_file():
        return [
            Finding(
                "error",
                cfg.name,
                f"{folder.name}/{metadata_file.name} is missing: rebuild with `make artifacts-gpu`",
            )
        ]
    metadata = json.loads(metadata_file.read_text())
    findings = []
    if int(metadata.get("max_batch", 0)) < cfg.max_batch_size:
        findings.append(
            Finding(
                "error",
                cfg.name,
                f"the program's batch range ends at "
                f"{metadata.get('max_batch')} < max_batch_size "
                f"{cfg.max_batch_size}: rebuild with `make artifacts-gpu`",
            )
        )
    torch_version = module_version("torch")
    if torch_version is None:
        findings.append(
            Finding(
                "skipped",
                cfg.name,
                "PyTorch is not installed: the program's PyTorch version was not compared",
            )
        )
    elif metadata.get("torch_version") != torch_version:
        findings.append(
            Finding(
                "error",
                cfg.name,
                f"{folder.name}/model.pt2 was exported with "
                f"PyTorch {metadata.get('torch_version')}; this host has "
                f"{torch_version}: rebuild it with `make artifacts-gpu`",
            )
        )
    return findings


def _check_onnx_interface(cfg: ModelConfig, onnx_file: Path, compare_types: bool) -> list[Finding]:
    """Config inputs/outputs vs the ONNX graph: names, element types and dims (the config's
    dims exclude the batch dimension when ``max_batch_size`` > 0; a tensor with ``reshape`` is
    compared by its ``reshape.shape``, what the model sees)."""
    try:
        import onnx
    except ImportError:
        return [
            Finding(
                "skipped",
                cfg.name,
                "onnx is not installed: the config was not compared with the ONNX graph",
            )
        ]
    graph = onnx.load(str(onnx_file), load_external_data=False).graph
    initializers = {i.name for i in graph.initializer}
    onnx_io = {
        "input": {v.name: v for v in graph.input if v.name not in initializers},
        "output": {v.name: v for v in graph.output},
    }
    findings = []
    where = f"{onnx_file.parent.name}/{onnx_file.name}"
    for kind, declared in (("input", cfg.input), ("output", cfg.output)):
        graph_tensors = onnx_io[kind]
        for tensor in declared:
            value = graph_tensors.get(tensor.name)
            if value is None:
                findings.append(
                    Finding(
                        "error",
                        cfg.name,
                        f"config {kind} '{tensor.name}' is "
                        f"not a graph {kind} of {where} "
                        f"({sorted(graph_tensors)})",
                    )
                )
                continue
            t = value.type.tensor_type
            dims = [d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim]
            if cfg.max_batch_size > 0:
                dims = dims[1:]
            if compare_types and ONNX_TYPES.get(t.elem_type) != tensor.data_type:
                findings.append(
                    Finding(
                        "error",
                        cfg.name,
                        f"'{tensor.name}' is "
                        f"{mc.DataType.Name(tensor.data_type)} in the config but "
                        f"element type {t.elem_type} in {where}",
                    )
                )
            # Triton's reshape: the model sees reshape.shape, the request the config's dims.
            model_dims = list(tensor.reshape.shape) if tensor.HasField("reshape") else tensor.dims
            if len(dims) != len(model_dims) or any(
                a != b and -1 not in (a, b) for a, b in zip(dims, model_dims, strict=False)
            ):
                findings.append(
                    Finding(
                        "error",
                        cfg.name,
                        f"'{tensor.name}' has dims "
                        f"{list(tensor.dims)} in the config but {dims} in "
                        f"{where} (batch dimension excluded)",
                    )
                )
    return findings
