"""What a TensorRT plan build needs for one core model (:class:`PlanFeeds`), as a type: the
description's samples give it (:mod:`builders.pipeline.plan_data`), or the function a builder
module names (``builders.tensorrt.spec_feeds``); :func:`builders.pipeline.plan_feeds.for_model`
finds which."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from tritonrepo_format.configs import ModelConfig

Shape = tuple[int, ...]
Profile = dict[str, tuple[Shape, Shape, Shape]]  # input name -> (min, opt, max)
Feed = dict[str, np.ndarray]


@dataclass(frozen=True)
class PlanFeeds:
    """What the plan builder needs for one core model, each part computed when called.

    Attributes:
        profile: ``(config) -> profile 0`` (input name -> ``(min, opt, max)`` shapes); raises
            ValueError when the config cannot have that profile.
        calibration: ``(profile, onnx_path) -> feeds``: INT8 calibration batches at the
            profile's OPT shape (``onnx_path``: the ONNX graph being built).
        gate: ``(reference, candidate, precision, reference_path) -> figures``: the engine
            (``candidate``, a Polygraphy runner) against ONNX Runtime FP32 (``reference``, on
            ``reference_path``), JSON-ready figures with ``"passed": True``; raises
            ``builders.gates.accuracy_gate.GateFailed`` beyond ``tolerance[precision]``.
        tolerance: precision (``"fp32"``, ``"fp16"``, ``"int8"``) -> the gate's limits.
        source: the module the feeds come from (recorded in ``plan_metadata.json``).
    """

    profile: Callable[[ModelConfig], Profile]
    calibration: Callable[[Profile, Path], list[Feed]]
    gate: Callable[[Any, Any, str, Path], dict]
    tolerance: Mapping[str, Any]
    source: str
