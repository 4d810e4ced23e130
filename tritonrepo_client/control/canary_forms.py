"""How a canary stages, promotes and takes away a new version, by the form the pipeline is
served in: one implementation per form, chosen in one place (:func:`canary_form`).

- :class:`EnsembleStep`: the pipeline is an ensemble and the rolled model one of its steps.
  The ensemble is pinned to the serving version ``old``, the model loaded with both versions,
  and the canary is the pipeline's config with the step pinned to N, loaded as
  ``<pipeline>__canary``. gRPC requests (which do not pass the guard) reach the pinned ``old``.
- :class:`OneStepCopy`: the pipeline is one Python model that runs its core itself (the
  one-step CPU or GPU model of a described pipeline; the rolled model is the pipeline or its
  core). Its versions stay as they are; the canary is a copy of it loaded as
  ``<pipeline>__canary`` through the load API, which runs as version N of the pipeline's model
  (``tritonrepo_as_version``: its code, core file and version folder are N's,
  ``tritonrepo.step.served_copy``). Both answer through the same code path, so their latency
  compares alike.

Each form checks that a canary can start (:class:`CanaryError` says why not), stages, promotes
(the route goes before the canary is unloaded, so no request is sent to a model going away),
undoes, and aborts what a killed canary left.
"""

from __future__ import annotations

import copy
import json
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from tritonrepo_client.connection import ClientError
from tritonrepo_client.control.repository import RepositoryClient
from tritonrepo_client.control.rollout import recorded_previous, with_policy
from tritonrepo_format.roles import ONE_STEP_CLASS, ONE_STEP_PARAMETER

CANARY_SUFFIX = "__canary"
PLACEHOLDER = "file:1/.canary"  # an ensemble needs a version folder; Triton makes it from this
# A copy runs as this version of the named model: the same name in tritonrepo.step.served_copy
# (tests/unit/test_canary_forms.py checks it).
AS_VERSION_PARAMETER = "tritonrepo_as_version"
# Parameters of the serving model that its canary copy leaves out: the drift counters (the
# copy's share of requests and the shadow copies would be counted twice in the pipeline's).
COPY_DROPS = ("tritonrepo_drift",)
UNLOAD_WAIT_S = 120.0  # for a version's requests to drain once it is unloaded


class CanaryError(ClientError):
    """The canary could not start, or a step failed (what was undone is in the message)."""


def entry_point(step_class: str = ONE_STEP_CLASS) -> str:
    """The ``model.py`` of a copy: the Python backend's ``TritonPythonModel`` as a subclass of
    ``step_class`` (``module:Class``), as the generator writes the one-step model's."""
    module, cls = step_class.split(":")
    return (
        '"""A canary\'s copy of a one-step model (tritonrepo.step.served_copy)."""\n\n'
        f"from {module} import {cls}\n\n\n"
        f"class TritonPythonModel({cls}):\n"
        '    """Python-backend entry point; initialize/execute/finalize come from the step."""\n'
    )


class CanaryForm(ABC):
    """A pipeline's serving form, as the canary drives it.

    Attributes:
        repo: client with the repository key.
        pipeline: the served model whose requests are split.
        model: the model whose version is rolled (in a one-step pipeline, the pipeline).
        version: the version rolled to.
        config: the pipeline's config as served when the canary starts.
        old: the version serving when it starts.
        canary: the canary model's name, ``<pipeline>__canary``.
        ensemble: whether the pipeline and its canary are ensembles (Triton counts an
            ensemble's failures twice: ``tritonrepo_client.control.live_metrics``).
    """

    ensemble = True

    def __init__(self, repo: RepositoryClient, pipeline: str, model: str, version: int,
                 config: dict[str, Any]) -> None:  # fmt: skip
        self.repo, self.pipeline, self.model, self.version = repo, pipeline, model, version
        self.config = config
        self.canary = pipeline + CANARY_SUFFIX
        self.old = self._serving_version()

    def _serving_version(self) -> int:
        serving = self.repo.versions(self.model)
        if len(serving) != 1 or serving == [self.version]:
            raise CanaryError(
                f"'{self.model}' serves {serving}: a canary starts from one serving version "
                f"other than {self.version}"
            )
        return serving[0]

    @abstractmethod
    def stage(self) -> str:
        """Load the canary beside the serving version; one line saying what serves what."""

    @abstractmethod
    def promote(self, remove_route: Callable[[], object]) -> None:
        """Make ``version`` the pipeline's, calling ``remove_route`` once no request needs to
        reach the canary; the canary unloaded and ``old`` drained."""

    @abstractmethod
    def undo(self, remove_route: Callable[[], object]) -> None:
        """Take the canary away (``remove_route`` first); ``old`` serves alone as before."""


class EnsembleStep(CanaryForm):
    """The pipeline is an ensemble with one step running ``model`` (module docstring)."""

    def __init__(self, repo: RepositoryClient, pipeline: str, model: str, version: int,
                 config: dict[str, Any]) -> None:  # fmt: skip
        pin = str(step_of(config, model).get("model_version", "-1"))
        if pin != "-1":
            raise CanaryError(
                f"'{pipeline}' runs {model} version {pin} pinned: a canary that did not finish "
                f"(undo it: tritonrepo-client canary {pipeline} --model {model} --abort), or a "
                "pin in the pipeline's own config (a canary needs model_version -1)"
            )
        super().__init__(repo, pipeline, model, version, config)
        self.model_config = repo.config(model)

    def stage(self) -> str:
        # Loading an ensemble reloads each of its steps whose folder changed on disk since that
        # step was loaded, with the config on disk: a version written since (version N) would
        # take the place of a rolled-out version that lives in an override, and the ensemble
        # pinned to it would fail to load (seen on 2.51: 957 of 982 live requests failed).
        # The step is loaded first as it serves, which brings Triton's record of its folder
        # up to date, so the pinned ensemble's load leaves it alone.
        previous = recorded_previous(self.model_config) or self.old
        self.repo.load(self.model, with_policy(self.model_config, [self.old], previous))
        self.repo.load(self.pipeline, pinned(self.config, self.model, self.old))
        self.repo.load(self.model, with_policy(self.model_config, [self.old, self.version],
                                               self.old))  # fmt: skip
        self.repo.load(self.canary, pinned(self.config, self.model, self.version, self.canary),
                       {PLACEHOLDER: b""})  # fmt: skip
        return (f"{self.canary} serves {self.model} version {self.version}; {self.pipeline} "
                f"stays on {self.old}")  # fmt: skip

    def promote(self, remove_route: Callable[[], object]) -> None:
        self.repo.load(self.pipeline, pinned(self.config, self.model, self.version))
        remove_route()
        self.repo.unload(self.canary)
        self.repo.load(self.model, with_policy(self.model_config, [self.version], self.old))
        self.repo.wait_until(self.model, [self.old], UNLOAD_WAIT_S)
        self.repo.load(self.pipeline, self.config)

    def undo(self, remove_route: Callable[[], object]) -> None:
        remove_route()
        restore_ensemble(self.repo, self.pipeline, self.model, self.old, self.model_config)
        self.repo.load(self.pipeline, self.config)


class OneStepCopy(CanaryForm):
    """The pipeline is one Python model running its core; the canary a copy of it running as
    version N (module docstring)."""

    ensemble = False

    def __init__(self, repo: RepositoryClient, pipeline: str, model: str, version: int,
                 config: dict[str, Any]) -> None:  # fmt: skip
        super().__init__(repo, pipeline, pipeline, version, config)

    def copy_config(self) -> dict[str, Any]:
        """The pipeline's config as the canary copy: renamed, one version (the upload's
        ``1``), running as ``version`` of the pipeline's model, without :data:`COPY_DROPS`."""
        new = copy.deepcopy(self.config)
        new["name"] = self.canary
        new["version_policy"] = {"specific": {"versions": [1]}}
        parameters = {k: v for k, v in new.get("parameters", {}).items() if k not in COPY_DROPS}
        value = json.dumps({"model": self.pipeline, "version": self.version})
        parameters[AS_VERSION_PARAMETER] = {"string_value": value}
        new["parameters"] = parameters
        return new

    def stage(self) -> str:
        self.repo.load(self.canary, self.copy_config(),
                       {"file:1/model.py": entry_point().encode()})  # fmt: skip
        return (f"{self.canary} runs {self.pipeline} version {self.version}; {self.pipeline} "
                f"stays on {self.old}")  # fmt: skip

    def promote(self, remove_route: Callable[[], object]) -> None:
        remove_route()
        self.repo.unload(self.canary)
        self.repo.load(self.pipeline, with_policy(self.config, [self.version], self.old))
        self.repo.wait_until(self.pipeline, [self.old], UNLOAD_WAIT_S)

    def undo(self, remove_route: Callable[[], object]) -> None:
        remove_route()
        if self.repo.ready(self.canary):
            self.repo.unload(self.canary)


def is_one_step(config: dict[str, Any]) -> bool:
    """Whether ``config`` is a Python model that runs a pipeline's core itself (it names the
    core in ``core_model``)."""
    return config.get("backend") == "python" and ONE_STEP_PARAMETER in config.get("parameters", {})


def canary_form(repo: RepositoryClient, pipeline: str, model: str, version: int) -> CanaryForm:
    """The form ``pipeline`` is served in, ready to stage a canary of ``model`` ``version``.

    Raises:
        CanaryError: the pipeline is stateful (sequence batching), or neither an ensemble with
            one step running ``model`` nor a one-step model of ``model`` (its own name or its
            core's), the step is pinned, or ``model`` does not serve one version other than
            ``version``.
        ClientError: a config cannot be read.
    """
    config = repo.config(pipeline)
    if "sequence_batching" in config:
        raise CanaryError(
            f"'{pipeline}' is stateful: a canary would send some events of a session to one "
            "model and the rest to the other, each with its own state. Roll out its core "
            "instead (tritonrepo-client rollout <core> --version N): the sessions' state stays "
            "in the session model, so open sessions go on, scored by the new version"
        )
    if is_one_step(config):
        core = config["parameters"][ONE_STEP_PARAMETER].get("string_value")
        if model not in (pipeline, core):
            raise CanaryError(
                f"'{pipeline}' is one Python model running {core}: roll '{pipeline}' (or name "
                f"its core, {core})"
            )
        return OneStepCopy(repo, pipeline, model, version, config)
    return EnsembleStep(repo, pipeline, model, version, config)


def step_of(config: dict[str, Any], model: str) -> dict[str, Any]:
    """The ensemble step of ``config`` that runs ``model``.

    Raises:
        CanaryError: the config is not an ensemble with such a step.
    """
    steps = config.get("ensemble_scheduling", {}).get("step", [])
    found = [s for s in steps if s.get("model_name") == model]
    if config.get("platform") != "ensemble" or len(found) != 1:
        raise CanaryError(
            f"'{config.get('name')}' is not an ensemble with one step running '{model}', nor "
            "one Python model running a pipeline's core"
        )
    return found[0]


def pinned(config: dict[str, Any], model: str, version: int, name: str | None = None) -> dict:
    """A copy of the ensemble ``config`` whose ``model`` step runs ``version`` (and named
    ``name`` when given)."""
    new = copy.deepcopy(config)
    step_of(new, model)["model_version"] = str(version)
    if name is not None:
        new["name"] = name
    return new


def restore_ensemble(repo: RepositoryClient, pipeline: str, model: str, keep: int,
                     model_config: dict[str, Any]) -> list[str]:  # fmt: skip
    """Take the canary ensemble of ``pipeline`` away, skipping what is gone already, then every
    version of ``model`` but ``keep`` (``model_config`` with that one version; its requests
    drain). Returns what was done, one phrase a step."""
    done = []
    canary = pipeline + CANARY_SUFFIX
    if repo.ready(canary):
        repo.unload(canary)
        done.append(f"{canary} unloaded")
    serving = repo.versions(model)
    if serving != [keep]:
        repo.load(model, with_policy(model_config, [keep], keep))
        repo.wait_until(model, [v for v in serving if v != keep], UNLOAD_WAIT_S)
        done.append(f"{model} serves version {keep} alone")
    return done
