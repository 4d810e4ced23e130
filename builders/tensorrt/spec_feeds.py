"""TensorRT plan feeds (``builders.pipeline.plan_feed_types.PlanFeeds``) of the cores whose profile
comes from their spec (``plan_config.model_profile``: ``tritonrepo/text/spec.py``,
``tritonrepo/ctr/spec.py``, ``tritonrepo/image/spec.py``). Their builder modules name these
functions in ``PLAN_FEEDS`` (``builders/onnx_export/text_embedding.py``, ``ctr.py`` and
``ctr_session.py``: :func:`text_or_ctr`; ``image.py``: :func:`image`); the samples are real
texts, click-log rows and photographs (``builders/tensorrt/plan_data.py``,
``builders/tensorrt/image_plan_data.py``).
"""

from __future__ import annotations

from pathlib import Path

from builders.pipeline.plan_feed_types import Feed, PlanFeeds, Profile
from builders.tensorrt import image_plan_data, plan_config, plan_data


def text_or_ctr(model: str, repository: Path) -> PlanFeeds:
    """The text encoder, ``ctr_model`` or ``ctr_session``: calibration from
    ``plan_data.calibration_feeds`` (``repository`` provides the text tokenizer), the gate
    ``accuracy_gate.run_gate`` on ``plan_data.gate_data`` with ``accuracy_gate.TOLERANCES``.

    Raises:
        ValueError: ``model`` is none of the three (raised when a part is used, by
            ``plan_config.model_profile``).
    """
    from builders.gates import accuracy_gate

    def calibration(profile: Profile, _onnx_path: Path) -> list[Feed]:
        return plan_data.calibration_feeds(model, profile, repository)

    def gate(reference, candidate, precision: str, _reference_path: Path) -> dict:
        return accuracy_gate.run_gate(
            model,
            reference,
            candidate,
            accuracy_gate.TOLERANCES[precision],
            plan_data.gate_data(model, repository),
        )

    return PlanFeeds(
        profile=lambda cfg: plan_config.model_profile(model, cfg),
        calibration=calibration,
        gate=gate,
        tolerance=accuracy_gate.TOLERANCES,
        source=plan_data.__name__,
    )


def image(model: str, repository: Path) -> PlanFeeds:
    """An image classifier: real-photo calibration and gate of ``image_plan_data`` with its
    ``TOLERANCES`` (``repository`` is not read: the photos are ``image_plan_data.PIXELS_FILE``).
    """

    def calibration(profile: Profile, _onnx_path: Path) -> list[Feed]:
        return image_plan_data.calibration_feeds(model, profile)

    def gate(reference, candidate, precision: str, _reference_path: Path) -> dict:
        return image_plan_data.run_gate(model, reference, candidate, precision)

    return PlanFeeds(
        profile=lambda cfg: plan_config.model_profile(model, cfg),
        calibration=calibration,
        gate=gate,
        tolerance=image_plan_data.TOLERANCES,
        source=image_plan_data.__name__,
    )
