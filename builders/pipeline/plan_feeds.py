"""One way to get what a TensorRT plan build needs for a core model: its optimization profile,
INT8 calibration feeds and accuracy gate (``builders.tensorrt.plans``).

:func:`for_model` finds the model's owner (``builders.pipeline.core_owners``: the descriptions
under ``pipelines/`` and their builder modules' ``MODELS``) and asks it:

* a core built by the generic builder (``onnx``/``build`` in its description): everything from
  the description's samples (``builders.pipeline.plan_data.plan_feeds``);
* a core built by a ``builder`` module: the function the module names in its ``PLAN_FEEDS``
  constant (``"package.module:function"``, called as ``function(model, repository) ->
  PlanFeeds``). ``builders/onnx_export/text_embedding.py``, ``ctr.py``, ``ctr_session.py`` and
  ``image.py`` name ``builders.tensorrt.spec_feeds``' functions. A name rather than a function:
  the builder module's staleness digest (``builders.pipeline.module_build``) follows its
  imports, even those inside functions, and the plan code is no source of its ONNX files.

Nothing here lists models: a model with a plan in its ``config.pbtxt`` but no owner, or whose
owner has no hook, is refused with a message that says which.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from builders.pipeline import plan_data
from builders.pipeline.core_owners import owner
from builders.pipeline.plan_feed_types import PlanFeeds
from tritonrepo_format.configs import load_config

HOOK = "PLAN_FEEDS"  # the builder module's "package.module:function" of its plan feeds
PLAN_PLATFORM = "tensorrt_plan"


class NoPlanFeeds(ValueError):
    """A model has no owner, or its owner has no plan feeds."""


def for_model(model: str, repository: Path) -> PlanFeeds:
    """The plan feeds of ``model`` (module docstring); ``repository`` is the model repository
    being built (text models read their tokenizer from it).

    Raises:
        NoPlanFeeds: no description or builder module owns ``model``, or its builder module
            names no ``PLAN_FEEDS`` function.
    """
    try:
        found = owner(model)
    except LookupError as exc:
        raise NoPlanFeeds(f"no TensorRT plan feeds for '{model}': {exc}") from None
    if found.builder is None:
        return plan_data.plan_feeds(found.pipeline)
    name = getattr(found.module(), HOOK, None)
    module, _, function = str(name).partition(":")
    hook = getattr(importlib.import_module(module), function, None) if name and function else None
    if not callable(hook):
        raise NoPlanFeeds(
            f"no TensorRT plan feeds for '{model}': its builder module {found.builder} "
            f"(named by {found.pipeline.source}) declares no {HOOK} = 'package.module:function' "
            f"(got {name!r})"
        )
    return hook(model, repository)


def plan_models(repository: Path) -> list[str]:
    """The models of ``repository`` whose ``config.pbtxt`` is a TensorRT plan, sorted (the
    models ``make build-plans`` builds), read from the configs."""
    return sorted(
        config.parent.name
        for config in repository.glob("*/config.pbtxt")
        if load_config(config).platform == PLAN_PLATFORM
    )
