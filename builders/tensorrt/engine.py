"""The TensorRT layer of ``builders.tensorrt.plans``: build one engine with Polygraphy and run it.

Thin on purpose (TensorRT is not installable on the development machines): the ONNX parse,
builder config (precision flags, profile, workspace, timing cache, INT8 calibrator), the
engine's I/O tensors and inference for the accuracy gate. TensorRT 10.x (NGC 26.05).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from builders.tensorrt.plan_config import IOTensor, Profile
from tritonrepo.paths import BUILD_DIR

CACHE_DIR = BUILD_DIR / "tensorrt"  # timing and calibration caches

# TensorRT data types (``trt.DataType`` member names) -> numpy-style names of plan_config.
ENGINE_DTYPES = {
    "FLOAT": "float32",
    "HALF": "float16",
    "BF16": "bfloat16",
    "INT8": "int8",
    "INT32": "int32",
    "INT64": "int64",
    "BOOL": "bool",
    "UINT8": "uint8",
}


def engine_dtype_name(trt_dtype_name: str) -> str:
    """numpy-style name of a TensorRT data type given its ``trt.DataType`` member name
    (``"INT64"`` -> ``"int64"``); types without one (FP8, INT4, FP4) keep their name in lower
    case, which ``plan_config.config_tensors`` then rejects."""
    return ENGINE_DTYPES.get(trt_dtype_name, trt_dtype_name.lower())


class Backend(Protocol):
    """The TensorRT-dependent steps of :func:`build_plan` (``TensorRTBackend``; tests pass a
    stand-in)."""

    def facts(self) -> dict[str, str]:
        """``tensorrt_version``, ``gpu_name``, ``compute_capability`` of this machine."""

    def build(self, onnx_path: Path, profile: Profile, precision: str, calibration, cache: Path):
        """The engine of ``onnx_path``; ``calibration`` feeds and ``cache`` path for INT8."""

    def io(self, engine) -> list[IOTensor]:
        """The engine's I/O tensors."""

    def profile(self, engine, names: Sequence[str]) -> Profile:
        """Profile 0 of the engine for the inputs ``names``."""

    def runner(self, engine, name: str):
        """A Polygraphy runner of the engine."""

    def save(self, engine, path: Path) -> None:
        """Serialize the engine to ``path``."""

    def settings(self) -> dict:
        """Builder settings for the metadata (workspace, timing cache, versions)."""


class TensorRTBackend:
    """TensorRT 10 through Polygraphy: build, inspect, run and save engines.

    Args:
        workspace_bytes: ``MemoryPoolType.WORKSPACE`` limit of the builder.
        cache_dir: folder of the timing cache (one file per TensorRT version and GPU
            architecture: TensorRT refuses a cache from another).

    Raises:
        ImportError: TensorRT or Polygraphy is missing (check ``missing_dependencies`` first).
    """

    def __init__(self, workspace_bytes: int, cache_dir: Path = CACHE_DIR) -> None:
        import tensorrt as trt

        self.trt = trt
        self.workspace_bytes = workspace_bytes
        self._facts = _gpu_facts() | {"tensorrt_version": trt.__version__}
        sm = self._facts["compute_capability"].replace(".", "")
        self.timing_cache = cache_dir / f"timing-trt{trt.__version__}-sm{sm}.cache"

    def facts(self) -> dict[str, str]:
        return dict(self._facts)

    def settings(self) -> dict:
        import polygraphy

        return {
            "workspace_bytes": self.workspace_bytes,
            "timing_cache": str(self.timing_cache),
            "polygraphy_version": polygraphy.__version__,
            "tf32": False,
        }

    def build(self, onnx_path: Path, profile: Profile, precision: str, calibration, cache: Path):
        from polygraphy.backend.trt import (
            Calibrator,
            CreateConfig,
            engine_from_network,
            network_from_onnx_path,
        )
        from polygraphy.backend.trt import Profile as TrtProfile

        trt_profile = TrtProfile()
        for name, (lo, opt, hi) in profile.items():
            trt_profile.add(name, min=lo, opt=opt, max=hi)
        calibrator = None
        if precision == "int8":
            calibrator = Calibrator(calibration, cache=str(cache))
        self.timing_cache.parent.mkdir(parents=True, exist_ok=True)
        config = CreateConfig(
            fp16=precision in ("fp16", "int8"),
            int8=precision == "int8",
            calibrator=calibrator,
            profiles=[trt_profile],
            load_timing_cache=str(self.timing_cache),
            memory_pool_limits={self.trt.MemoryPoolType.WORKSPACE: self.workspace_bytes},
        )
        network = network_from_onnx_path(str(onnx_path))
        return engine_from_network(network, config=config, save_timing_cache=str(self.timing_cache))

    def io(self, engine) -> list[IOTensor]:
        trt = self.trt
        tensors = []
        for i in range(engine.num_io_tensors):
            name = engine.get_tensor_name(i)
            tensors.append(
                IOTensor(
                    name,
                    engine_dtype_name(engine.get_tensor_dtype(name).name),
                    tuple(engine.get_tensor_shape(name)),
                    engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT,
                )
            )
        return tensors

    def profile(self, engine, names: Sequence[str]) -> Profile:
        shapes = {}
        for name in names:
            lo, opt, hi = engine.get_tensor_profile_shape(name, 0)
            shapes[name] = (tuple(lo), tuple(opt), tuple(hi))
        return shapes

    def runner(self, engine, name: str):
        from polygraphy.backend.trt import TrtRunner

        return TrtRunner(engine, name=name)

    def save(self, engine, path: Path) -> None:
        from polygraphy.backend.trt import save_engine

        save_engine(engine, path=str(path))


def _gpu_facts() -> dict[str, str]:
    """Name and compute capability of GPU 0 as the preflight reads them (``nvidia-smi``,
    :func:`tritonrepo.server.artifact_checks.gpu_facts`), so the plan's metadata and the check that
    compares it with the serving GPU agree on the format (e.g. ``"9.0"``).

    Raises:
        RuntimeError: no GPU is visible.
    """
    from tritonrepo.server.artifact_checks import gpu_facts

    facts = gpu_facts()
    if facts is None:
        raise RuntimeError("no GPU visible (nvidia-smi): build the plans on the serving GPU")
    return {"gpu_name": facts[0], "compute_capability": facts[1]}
