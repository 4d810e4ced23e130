"""What each model of a repository is, read from its configs: the lists of models that the
launcher, the health checks, the queue policy and the builders use are derived here, not kept
by hand.

- **top level**: a model that is neither a step of an ensemble nor called by another model
  through BLS (config parameter :data:`CALLS_PARAMETER`, ``tritonrepo_calls``): what a client
  sends requests to.
- **served by default**: a top-level model that declares its health probe (config parameter
  :data:`PROBE_PARAMETER`, ``tritonrepo_probe``; format:
  :mod:`tritonrepo_client.control.probe_declaration`; every described pipeline's config
  does), in order of name. ``make serve``, the container's entrypoint, the preflight and the
  GPU host's pack take this list.
- **core**: a model whose config, in any config set of the table
  (:data:`tritonrepo_format.config_sets.CONFIG_SETS`), runs on that set's core
  runtime (a TensorRT plan, the ``onnxruntime_python`` or ``torch_python`` backend), not a
  Python step: the models with the core queue policy, whose files the builds make.
- **one step**: a Python-backend model that runs a pipeline's core itself in a set
  (:func:`one_step_models`): it carries the core queue policy in that set.

Every function reads the default set's ``config.pbtxt`` for the graph (steps and calls) unless
given a set; a config that does not parse counts as nothing (the preflight names it).
"""

from __future__ import annotations

from pathlib import Path

from google.protobuf import text_format

from tritonrepo_format.config_sets import CONFIG_SETS
from tritonrepo_format.configs import (
    ModelConfig,
    core_runtime_models,
    ensemble_steps,
    model_names,
    models_where,
    read_config,
)

PROBE_PARAMETER = "tritonrepo_probe"
# A pipeline that answers OpenAI's POST /v1/embeddings through the HTTP guard
# (deploy/guard/openai_embeddings.js): JSON {"input", "output", "tokens", "dimensions"}.
OPENAI_EMBEDDINGS_PARAMETER = "tritonrepo_openai_embeddings"
CALLS_PARAMETER = "tritonrepo_calls"
# A Python-backend model that runs a pipeline's core itself (the one-step CPU model of a
# described pipeline, tritonrepo.pipelines.fused_step) names the core's folder in this parameter.
ONE_STEP_PARAMETER = "core_model"
# The class a one-step model's ``model.py`` subclasses (written by the generator; a canary's copy
# of a one-step model uploads the same entry point).
ONE_STEP_CLASS = "tritonrepo.pipelines.one_step:OneStep"
# A one-step model that runs other models' code and files in its own process (the one-step GPU
# model, tritonrepo.pipelines.chained_step) names them here, comma-separated: the preflight
# checks their files and make gpu-pack carries them; they are not loaded with it.
STAGES_PARAMETER = "tritonrepo_stages"


def _configs(repository: Path, config_set: str | None) -> dict[str, ModelConfig]:
    """Model name -> its config in ``config_set``; models whose config does not parse left out."""
    configs = {}
    for model in model_names(repository):
        try:
            configs[model] = read_config(repository, model, config_set)
        except text_format.ParseError:
            continue
    return configs


def calls_of(config: ModelConfig) -> tuple[str, ...]:
    """The models ``config`` declares it calls through BLS (``tritonrepo_calls``: names
    separated by commas, blanks dropped), in order; () when it declares none."""
    value = config.parameters[CALLS_PARAMETER].string_value if _has(config, CALLS_PARAMETER) else ""
    return tuple(dict.fromkeys(n.strip() for n in value.split(",") if n.strip()))


def declares_probe(config: ModelConfig) -> bool:
    """Whether ``config`` declares a health probe (a non-blank ``tritonrepo_probe``)."""
    return _has(config, PROBE_PARAMETER) and bool(
        config.parameters[PROBE_PARAMETER].string_value.strip()
    )


def _has(config: ModelConfig, key: str) -> bool:
    return key in config.parameters


def dependents(repository: Path, config_set: str | None = None) -> set[str]:
    """The models another model of ``repository`` uses: ensemble steps and BLS callees."""
    used: set[str] = set()
    for config in _configs(Path(repository), config_set).values():
        used.update(ensemble_steps(config), calls_of(config))
    return used


def top_level_models(repository: Path, config_set: str | None = None) -> list[str]:
    """The models no other model uses (neither a step nor called through BLS), by name."""
    used = dependents(repository, config_set)
    return [m for m in model_names(Path(repository)) if m not in used]


def served_models(repository: Path, config_set: str | None = None) -> tuple[str, ...]:
    """The models served by default (module docstring): the top-level models that declare a
    probe, by name."""
    configs = _configs(Path(repository), config_set)
    used = set()
    for config in configs.values():
        used.update(ensemble_steps(config), calls_of(config))
    return tuple(
        model
        for model, config in sorted(configs.items())
        if model not in used and declares_probe(config)
    )


def core_models(repository: Path) -> tuple[str, ...]:
    """The models that run on a core runtime in at least one config set of the table, by
    name (module docstring)."""
    found: set[str] = set()
    for name in CONFIG_SETS:
        found.update(core_runtime_models(Path(repository), name))
    return tuple(sorted(found))


def one_step_models(repository: Path, config_set: str | None) -> tuple[str, ...]:
    """The models whose config in ``config_set`` is a one-step pipeline (a Python-backend model
    with the :data:`ONE_STEP_PARAMETER`): they run the core, so they carry the core's queue
    policy; their core's files are built for the core model, not for them."""
    return tuple(
        models_where(
            Path(repository),
            config_set,
            lambda c: c.backend == "python" and ONE_STEP_PARAMETER in c.parameters,
        )
    )


__all__ = [
    "CALLS_PARAMETER",
    "ONE_STEP_PARAMETER",
    "OPENAI_EMBEDDINGS_PARAMETER",
    "PROBE_PARAMETER",
    "STAGES_PARAMETER",
    "calls_of",
    "core_models",
    "declares_probe",
    "dependents",
    "one_step_models",
    "served_models",
    "top_level_models",
]
