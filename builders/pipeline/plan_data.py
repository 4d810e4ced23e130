"""TensorRT plans of the described pipelines' core models (``make build-plans``): their
optimization profile, INT8 calibration feeds and accuracy gate, all from the description.

* Profile 0 spans batch 1 to the GPU config's ``max_batch_size``, OPT half of it (at least 1);
  the other dims are the config's (a plan needs them fixed: ``fixed_dims`` in the description).
* INT8 calibration: the samples through the preprocess function, repeated to whole OPT batches.
* Gate: the engine vs ONNX Runtime FP32 on the same preprocessed samples; every float output's
  largest deviation, relative to the reference output's largest magnitude, must stay within
  :data:`RELATIVE_TOLERANCE` of the precision.
"""

from __future__ import annotations

from functools import lru_cache, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from builders.gates.accuracy_gate import GateFailed, paired_outputs
from builders.pipeline.core_owners import described_pipelines
from builders.pipeline.plan_feed_types import PlanFeeds, Profile

if TYPE_CHECKING:
    from tritonrepo.description import Pipeline
    from tritonrepo_format.configs import ModelConfig

# max |engine - FP32| / max |FP32| per float output: FP32 kernels reorder sums; FP16 keeps
# ~3 decimal digits; INT8 (calibrated) stays within a few percent on a healthy graph.
RELATIVE_TOLERANCE = {"fp32": 1e-4, "fp16": 1e-2, "int8": 5e-2}


@lru_cache(maxsize=1)
def described_plan_models() -> dict[str, Pipeline]:
    """``{core model: pipeline}`` of the descriptions whose core this package builds (an
    ``onnx`` file or a ``build`` function; a ``builder`` core has its own plan code)."""
    # the cores of a graph description get no plan yet (builders.pipeline.kinds.graph.NO_PLAN)
    return {p.core.model: p for p in described_pipelines() if p.core.builder is None}


def plan_feeds(pipeline: Pipeline) -> PlanFeeds:
    """The plan feeds of a generic core (``builders.pipeline.plan_feeds.for_model``): profile,
    calibration and gate of this module, from ``pipeline``'s description and samples."""

    def calibration(plan_profile: Profile, onnx_path: Path) -> list[dict[str, np.ndarray]]:
        return calibration_feeds(pipeline, plan_profile, onnx_path)

    def gate(reference: Any, candidate: Any, precision: str, reference_path: Path) -> dict:
        return run_gate(pipeline, reference, candidate, precision, reference_path)

    return PlanFeeds(
        profile=partial(profile, pipeline),
        calibration=calibration,
        gate=gate,
        tolerance=RELATIVE_TOLERANCE,
        source=__name__,
    )


def profile(pipeline: Pipeline, cfg: ModelConfig) -> Profile:
    """Profile 0 of the core model (module docstring), from its GPU config.

    Raises:
        ValueError: the config does not batch, or an input has a dynamic dim.
    """
    if cfg.max_batch_size <= 0:
        raise ValueError(f"{cfg.name}: the config must batch (max_batch_size > 0)")
    opt = max(1, cfg.max_batch_size // 2)
    out: Profile = {}
    for tensor in cfg.input:
        dims = tuple(tensor.reshape.shape) if tensor.HasField("reshape") else tuple(tensor.dims)
        if any(d < 0 for d in dims):
            raise ValueError(
                f"{cfg.name}: input '{tensor.name}' has dynamic dims {list(dims)}; a TensorRT "
                f"plan needs them fixed: set fixed_dims in {pipeline.source.name}"
            )
        out[tensor.name] = ((1, *dims), (opt, *dims), (cfg.max_batch_size, *dims))
    return out


def sample_feeds(pipeline: Pipeline, onnx_path: Path) -> dict[str, np.ndarray]:
    """The inputs of the built graph ``onnx_path`` for the samples
    (``builders.pipeline.core_feeds.core_feeds``): the plan builder reads the model that
    ``make artifacts`` wrote, not its source (which may need packages its image lacks)."""
    # Imported here: the plan builder imports this module for profiles alone, without the
    # build's own imports (the launcher's preflight, the quantizer, the torch exports).
    from builders.pipeline.core_feeds import core_feeds

    return core_feeds(pipeline, onnx_path)


def calibration_feeds(
    pipeline: Pipeline, plan_profile: Profile, onnx_path: Path
) -> list[dict[str, np.ndarray]]:
    """INT8 calibration batches at the OPT batch size: the preprocessed samples (the inputs of
    ``onnx_path``), repeated until each batch is full (at least one batch)."""
    feeds = sample_feeds(pipeline, onnx_path)
    opt = next(iter(plan_profile.values()))[1][0]
    rows = len(next(iter(feeds.values())))
    batches = max(1, rows // opt)
    index = np.arange(batches * opt) % rows
    return [
        {k: v[index[i * opt : (i + 1) * opt]] for k, v in feeds.items()} for i in range(batches)
    ]


def run_gate(
    pipeline: Pipeline, reference: Any, candidate: Any, precision: str, onnx_path: Path
) -> dict:
    """The engine (``candidate``, a Polygraphy runner) vs ONNX Runtime FP32 (``reference``)
    on the preprocessed samples (the inputs of ``onnx_path``), judged against
    :data:`RELATIVE_TOLERANCE`.

    Raises:
        builders.gates.accuracy_gate.GateFailed: a float output deviates more.
    """
    limit = RELATIVE_TOLERANCE[precision]
    feeds = sample_feeds(pipeline, onnx_path)
    figures: dict[str, float] = {}
    for a, b in paired_outputs(reference, candidate, [feeds]):
        for name, ref in a.items():
            ref = np.asarray(ref)
            if ref.dtype.kind != "f":
                figures[name] = float(np.count_nonzero(ref != np.asarray(b[name])))
                continue
            scale = float(np.max(np.abs(ref))) or 1.0
            figures[name] = float(np.max(np.abs(ref - np.asarray(b[name], ref.dtype)))) / scale
    failing = [f"{n} {v:.2e} > {limit}" for n, v in figures.items() if v > limit]
    if failing:
        raise GateFailed(
            f"{pipeline.core.model}: accuracy gate vs ONNX Runtime FP32: {'; '.join(failing)}"
        )
    return {"rows": len(next(iter(feeds.values()))), "relative_max_abs": figures,
            "tolerance": limit, "passed": True}  # fmt: skip
