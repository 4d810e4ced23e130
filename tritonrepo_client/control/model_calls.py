"""The models a served model calls through BLS, declared in its config, and what must be loaded
with it.

A Python-backend model may run another model itself (a BLS call: ``pb_utils.InferenceRequest(
model_name=...).exec()``). Triton loads an ensemble's steps with the ensemble, but it does not
know BLS calls: a called model that is not loaded answers "Model '...' is not ready". A model
that makes BLS calls says so in its config, comma-separated::

    parameters { key: "tritonrepo_calls" value { string_value: "ctr_model" } }

:func:`load_closure` gives the models to load besides a served one: the declared calls of the
model and of its ensemble steps (nested ensembles included), and of the called models in turn.
The launcher reads the configs from the repository on disk (:func:`disk_configs`), the control
commands through the server's model-configuration API (:func:`server_configs`); both give the
config as Triton's JSON (``ModelConfig`` field names).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from tritonrepo_format.roles import CALLS_PARAMETER

# model name -> its config as Triton's JSON (ModelConfig field names), or None when unknown.
ConfigReader = Callable[[str], Mapping[str, Any] | None]


def parse_calls(text: str) -> tuple[str, ...]:
    """The model names of a ``tritonrepo_calls`` value: comma-separated, blanks dropped, each
    once, in order."""
    return tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))


def declared_calls(config: Mapping[str, Any]) -> tuple[str, ...]:
    """The models ``config`` (Triton's JSON) declares it calls through BLS (parameter
    ``tritonrepo_calls``); () when it declares none."""
    value = config.get("parameters", {}).get(CALLS_PARAMETER, {})
    return parse_calls(value.get("string_value", "") if isinstance(value, Mapping) else "")


def ensemble_steps(config: Mapping[str, Any]) -> tuple[str, ...]:
    """The step models of an ensemble config (Triton's JSON), in order; () for other models."""
    steps = config.get("ensemble_scheduling", {}).get("step", [])
    return tuple(dict.fromkeys(s["model_name"] for s in steps if s.get("model_name")))


def load_closure(models: Iterable[str], config_of: ConfigReader) -> tuple[str, ...]:
    """The models to load besides ``models`` so that every BLS call they make finds its model
    READY: the declared calls of each model and of its ensemble steps (recursively), and of
    each called model in turn (its steps included, since Triton loads those with it).

    Ensemble steps themselves are not listed: Triton loads them with their ensemble. A model
    whose config ``config_of`` does not know (None) contributes nothing; cycles end.

    Returns:
        The called models not in ``models``, each once, every model after the models it calls
        (so loading them in order loads a callee before its caller).
    """
    wanted = tuple(models)
    order: list[str] = []
    seen: set[str] = set()

    def calls_under(model: str, visiting: set[str]) -> list[str]:
        """Declared calls of ``model`` and of its nested ensemble steps."""
        if model in visiting:
            return []
        visiting.add(model)
        config = config_of(model)
        if not config:
            return []
        found = list(declared_calls(config))
        for step in ensemble_steps(config):
            found += calls_under(step, visiting)
        return found

    def visit(model: str) -> None:
        if model in seen:
            return
        seen.add(model)
        for called in calls_under(model, set()):
            visit(called)
        order.append(model)

    for model in wanted:
        visit(model)
    return tuple(m for m in order if m not in wanted)


def used_models(models: Iterable[str], config_of: ConfigReader) -> set[str]:
    """Every model that ``models`` run, besides themselves unless one runs another: their
    ensemble steps and the models they call through BLS, and in turn what those run."""
    found: set[str] = set()
    stack = list(models)
    while stack:
        config = config_of(stack.pop())
        if not config:
            continue
        for name in (*ensemble_steps(config), *declared_calls(config)):
            if name not in found:
                found.add(name)
                stack.append(name)
    return found


def callers(called: str, models: Iterable[str], config_of: ConfigReader) -> tuple[str, ...]:
    """Those of ``models`` whose load closure (:func:`load_closure`) holds ``called``: the
    models whose BLS calls need it."""
    return tuple(m for m in models if m != called and called in load_closure([m], config_of))


def disk_configs(repository: Path, config_name: str | None = None) -> ConfigReader:
    """A :data:`ConfigReader` of the model repository on disk: each model's
    ``configs/<config_name>.pbtxt`` when present, else its ``config.pbtxt``, as Triton resolves
    ``--model-config-name``; None for a model without a config. Configs are read once.

    Raises (from the reader):
        ConfigParseError: a config does not parse.
    """
    from google.protobuf.json_format import MessageToDict

    from tritonrepo_format.config_sets import config_path
    from tritonrepo_format.configs import load_config

    cache: dict[str, Mapping[str, Any] | None] = {}

    def read(model: str) -> Mapping[str, Any] | None:
        if model not in cache:
            path = config_path(Path(repository), model, config_name)
            cache[model] = (
                MessageToDict(load_config(path), preserving_proto_field_name=True)
                if path.is_file()
                else None
            )
        return cache[model]

    return read


def server_configs(config: Callable[[str], Mapping[str, Any]]) -> ConfigReader:
    """A :data:`ConfigReader` over ``config(model)``, e.g.
    :meth:`tritonrepo_client.control.repository.RepositoryClient.config` (the loaded model's
    effective config); None where it raises (the model is not loaded). Configs are read once."""
    from tritonrepo_client.errors import ClientError

    cache: dict[str, Mapping[str, Any] | None] = {}

    def read(model: str) -> Mapping[str, Any] | None:
        if model not in cache:
            try:
                cache[model] = config(model)
            except ClientError:
                cache[model] = None
        return cache[model]

    return read


__all__ = [
    "CALLS_PARAMETER",
    "ConfigReader",
    "callers",
    "declared_calls",
    "disk_configs",
    "ensemble_steps",
    "load_closure",
    "parse_calls",
    "server_configs",
    "used_models",
]
