"""Which code builds each core model, read from the descriptions (``pipelines/*/pipeline.toml``).

A core of a description is built one of two ways:

* by the generic builder (``onnx = "file.onnx"`` or ``build = "module:function"``): its owner is
  the description itself;
* by a ``builder = "package.module"`` of this repository: its owner is that module. A builder
  module that writes more than its description's core declares them all in ``MODELS`` (a tuple of
  model names, e.g. ``builders.onnx_export.image`` also writes ``image_classifier_resnet50``);
  without ``MODELS`` it owns its core alone.

What else a builder module may declare, read through its owner by other tools:
``plan_feeds(model, repository)`` (TensorRT calibration and gate: ``builders.pipeline.plan_feeds``)
and ``GPU_SOURCES`` (what an offline GPU host needs to export its models:
``builders.gpu_sources``). Only single-core descriptions (``Pipeline``) are read; the cores of a
graph description have no plan yet.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import lru_cache
from types import ModuleType

from tritonrepo.description import Pipeline, discover, load
from tritonrepo.paths import PIPELINES


@dataclass(frozen=True)
class Owner:
    """Who builds one core model.

    Attributes:
        model: the core model's name (its folder in the model repository).
        pipeline: the description that names the core (for a module's extra ``MODELS``: the
            description that names the module).
        builder: the builder module's dotted name, or None for the generic builder.
    """

    model: str
    pipeline: Pipeline
    builder: str | None

    def module(self) -> ModuleType:
        """The builder module, imported.

        Raises:
            ValueError: the core is built by the generic builder (no module).
        """
        if self.builder is None:
            raise ValueError(f"{self.model} is built by the generic builder, not by a module")
        return importlib.import_module(self.builder)


@lru_cache(maxsize=1)
def described_pipelines() -> tuple[Pipeline, ...]:
    """Every single-core description under ``pipelines/``, in ``discover``'s order."""
    return tuple(p for p in (load(path) for path in discover(PIPELINES)) if isinstance(p, Pipeline))


def owners() -> dict[str, Owner]:
    """``{core model: Owner}`` over every description and every builder module's ``MODELS``.

    Raises:
        ValueError: a model is claimed twice (two descriptions, or a module's ``MODELS`` and
            another description), naming both claimants. Two descriptions naming the same
            builder module are one claim (one builder run serves both).
    """
    found: dict[str, Owner] = {}
    for pipeline in described_pipelines():
        core = pipeline.core
        if core.builder is None:
            claims = [Owner(core.model, pipeline, None)]
        else:
            module = importlib.import_module(core.builder)
            models = tuple(getattr(module, "MODELS", (core.model,)))
            if core.model not in models:
                raise ValueError(
                    f"{core.builder}.MODELS {models} does not name {core.model}, the core of "
                    f"{pipeline.source}"
                )
            claims = [Owner(model, pipeline, core.builder) for model in models]
        for claim in claims:
            previous = found.get(claim.model)
            shared = previous is not None and previous.builder == claim.builder is not None
            if previous is not None and not shared:
                raise ValueError(
                    f"{claim.model} is claimed by {_who(previous)} and by {_who(claim)}: "
                    f"one model, one owner"
                )
            found[claim.model] = claim
    return found


def owner(model: str) -> Owner:
    """The owner of ``model``.

    Raises:
        LookupError: no description names ``model`` as its core and no builder module lists it
            in ``MODELS``; the message lists the known models.
    """
    table = owners()
    if model not in table:
        raise LookupError(
            f"'{model}' is not a core model of any description in {PIPELINES} (core [model]) "
            f"nor in a builder module's MODELS; known: {', '.join(sorted(table))}"
        )
    return table[model]


def _who(claim: Owner) -> str:
    if claim.builder is None:
        return f"the description {claim.pipeline.source}"
    return f"the builder module {claim.builder} (named by {claim.pipeline.source})"
