"""Checks ``models load`` and ``rollout`` make before anything is sent, when the client runs
beside the server's model repository, so a load that cannot work is refused with what to fix.

Triton 2.51 answers most of these mistakes with "failed to poll from model repository" or not
at all: a Python model whose version folder has no ``model.py`` stays LOADING until the server
restarts, and a model whose new config no longer matches an ensemble that uses it makes Triton
unload that ensemble ("has no available versions"). Here:

* a model name that is neither in the local repository nor in the server's index is refused
  with the closest names (``difflib``);
* the repository preflight's own checks (:func:`tritonrepo.server.preflight.run`) run for the model:
  a missing ``model.py`` or artifact, a ``config.pbtxt`` that does not parse (told as
  ``<file>:<line>:<column>: <reason>``), an inconsistent ensemble;
* a config whose inputs or outputs differ from the serving ones while a loaded ensemble uses
  the model is refused unless forced, naming the ensemble and the tensor (the interface check
  of ``configs use``: :func:`tritonrepo_client.control.config_sets.interface_change`);
* a model still LOADING from an earlier load is refused: a second load waits behind the first
  and holds one more of Triton's HTTP frontend threads.

A model the server lists but the local repository lacks is left to the server (the client then
runs beside another repository, or none).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from google.protobuf import json_format

from tritonrepo_client.connection import ClientError
from tritonrepo_client.control.local import local_repository
from tritonrepo_client.control.repository import ModelVersionState, RepositoryClient
from tritonrepo_format.config_sets import config_path
from tritonrepo_format.configs import load_config


class LoadRefused(ClientError):
    """A load refused before it was sent; the message says why and what to fix."""

    kind = "invalid"


def local_models(repository: Path) -> list[str]:
    """The model folders (with a ``config.pbtxt``) of a local repository, sorted."""
    if not Path(repository).is_dir():
        return []
    return sorted(p.parent.name for p in Path(repository).glob("*/config.pbtxt"))


def unknown_model(model: str, names: Iterable[str], where: str) -> LoadRefused:
    """The refusal of a model name that is not among ``names``: "no model 'x' in <where>; did
    you mean 'y'?" (the closest name by ``difflib.get_close_matches``, cutoff 0.6; all names
    when none is close)."""
    names = sorted(set(names))
    close = difflib.get_close_matches(model, names, n=1, cutoff=0.6)
    hint = f"did you mean '{close[0]}'?" if close else f"its models: {', '.join(names) or 'none'}"
    return LoadRefused(f"no model '{model}' in {where}; {hint}")


def check_name(model: str, repository: Path | None, index: list[ModelVersionState]) -> bool:
    """Whether ``model`` is in the local ``repository`` (True: check it locally), or only in
    the server's ``index`` (False: leave it to the server).

    Raises:
        LoadRefused: in neither; the message suggests the closest names.
    """
    local = local_models(repository) if repository is not None else []
    if model in local:
        return True
    served = {r.name for r in index}
    if model in served:
        return False
    where = f"{repository}" if local else "the server's repository index"
    if local:
        where += " (nor in the server's repository index)"
    raise unknown_model(model, [*local, *served], where)


def preflight_problems(repository: Path, model: str, config_name: str | None) -> list[str]:
    """The repository's own checks of ``model`` and what it depends on (the preflight, when the
    package that serves the repository is installed: :mod:`tritonrepo_client.control.local`),
    one line each."""
    return local_repository().check(repository, model, config_name)


def disk_config(repository: Path, model: str, config_name: str | None) -> tuple[dict, Path]:
    """``model``'s config as Triton would read it from ``repository`` (ModelConfig JSON), and
    its file.

    Raises:
        tritonrepo_format.configs.ConfigParseError: it does not parse.
    """
    path = config_path(repository, model, config_name)
    return json_format.MessageToDict(load_config(path), preserving_proto_field_name=True), path


def interface_breaks(
    repo: RepositoryClient, model: str, target: dict[str, Any], source: str
) -> list[str]:
    """For each READY ensemble that uses ``model`` as a step: a sentence naming it and the
    first tensor whose name, kind, data type or dims differ between the serving config and
    ``target`` (from ``source``, a file or "--config FILE"). [] when ``model`` is not loaded,
    no ensemble uses it, or the tensors agree."""
    from tritonrepo_client.control.config_sets import interface_change
    from tritonrepo_client.control.rollout import dependent_ensembles

    if not repo.versions(model):
        return []
    ensembles = dependent_ensembles(repo, model)
    if not ensembles:
        return []
    change = interface_change(repo.config(model), target)
    if change is None:
        return []
    return [
        f"the loaded ensemble '{name}' uses {model}, and {source} changes its interface "
        f"({change}): Triton would unload '{name}' (\"has no available versions\")"
        for name in ensembles
    ]


def check_load(
    repo: RepositoryClient,
    model: str,
    repository: Path | None,
    config_name: str | None = "cpu",
    override: dict[str, Any] | None = None,
    override_source: str = "--config",
    force: bool = False,
) -> None:
    """Everything above for ``models load MODEL`` (see the module docstring).

    Args:
        repo: the repository client (its index, configs and ensembles are read).
        model: the model to load.
        repository: the local model repository (None or absent: only the server's index is
            used, for the name).
        config_name: the config set the server runs (``--model-config-name``; None =
            ``config.pbtxt``).
        override: the ``--config`` override that replaces the on-disk config, if any.
        override_source: how to name it in messages.
        force: load even when the interface no longer matches a loaded ensemble.

    Raises:
        LoadRefused: the load cannot work, or would take a loaded ensemble down (unless
            ``force``); the message names the file, the tensor or the ensemble, and the fix.
        ClientError: the server's index cannot be read.
    """
    index = repo.index()
    rows = [r for r in index if r.name == model]
    if any(r.state == "LOADING" for r in rows):
        raise LoadRefused(
            f"{model} is still LOADING from an earlier load that has not returned; another "
            "load would wait behind it, holding one more of Triton's HTTP threads. A model "
            "stuck LOADING (e.g. a Python model without model.py) is only cleared by a server "
            f"restart; check it first with `python -m tritonrepo.server.preflight --model {model}`"
        )
    if repository is None or not Path(repository).is_dir():
        if model not in {r.name for r in index}:
            raise unknown_model(model, [r.name for r in index], "the server's repository index")
        target, source = override, override_source
    elif not check_name(model, repository, index):
        target, source = override, override_source
    else:
        problems = preflight_problems(repository, model, config_name)
        if override is None and problems:
            raise LoadRefused(
                f"not loading {model}: " + "; ".join(problems) + "; nothing was sent (check "
                "the repository with `python -m tritonrepo.server.preflight --repository "
                f"{repository} --model {model}`)"
            )
        if override is None:
            target, path = disk_config(repository, model, config_name)
            source = str(path)
        else:
            target, source = override, override_source
    if target is None or force:
        return
    breaks = interface_breaks(repo, model, target, source)
    if breaks:
        raise LoadRefused(
            f"not loading {model}: " + "; ".join(breaks) + ". Nothing was sent; load the "
            "ensemble's new config with it, or pass --force to load anyway"
        )


def check_rollout_name(repo: RepositoryClient, model: str, repository: Path | None) -> None:
    """Refuse a ``rollout``/``rollback`` of a model that neither the local ``repository`` nor
    the server's index knows, suggesting the closest names.

    Raises:
        LoadRefused: unknown model.
    """
    check_name(model, repository, repo.index())


__all__ = [
    "LoadRefused",
    "check_load",
    "check_name",
    "check_rollout_name",
    "interface_breaks",
    "local_models",
    "preflight_problems",
    "unknown_model",
]
