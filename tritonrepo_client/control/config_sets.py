"""Switch a running server between config sets (``configs/<name>.pbtxt``; the sets and their files:
:mod:`tritonrepo_format.config_sets`) through the load API:
the CPU fallback (``tritonrepo-client configs use cpu``) and the way back
(``configs use default``, i.e. each model's ``config.pbtxt``).

A config set is what ``--model-config-name`` selects at start: a model with
``configs/<name>.pbtxt`` uses it, a model without one uses ``config.pbtxt``. Switching a running
server reloads every loaded model (ensembles excepted: Triton reloads them with their steps)
with its target config as a load-API override. Triton keeps the old instances serving until the
new ones have loaded, and a failed load leaves them serving (the facts ``rollout`` relies on),
so in-flight and new requests are not dropped. The safety of ``rollout`` applies:

1. a health check first (every served model answers a probe; ``force`` skips it, e.g. when the
   GPU path is already failing and the fallback is the cure);
2. every target config is parsed (ModelConfig) and must have the same inputs and outputs as
   the config serving now (names, data types, dims): a model whose tensors change would break
   the ensembles wired to it between two reloads, so such a switch is refused before anything
   is loaded (the ``torch_gpu`` set passes FP16 between encoder and pool, so switching it with
   ``cpu`` needs a restart with ``--model-config-name``);
3. one model at a time, each followed by a probe of every served model; a failed load or
   probe puts the configs that were serving back, in reverse order, and raises.

The served versions are kept: the target config's ``version_policy`` names exactly the
versions that are READY in the repository index (a rolled-out version stays live, a
rolled-back one stays unloaded; the policy that ``get_model_config`` reports can be stale after
a rollback), and a failed switch puts the serving configs back with those versions too. Each
override carries the parameter ``tritonrepo_config_set`` so :func:`current_config_sets` can
tell which set serves, and keeps the rollout record so ``rollback`` still works. The probes are
those of ``tritonrepo-client health``: the served models' (built-in or declared) and those of
every other loaded model that declares one (:func:`probed_models`).
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2

from tritonrepo_client.connection import ClientError, TritonConnection
from tritonrepo_client.control.health import check_health
from tritonrepo_client.control.probe_declaration import PROBE_PARAMETER
from tritonrepo_client.control.repository import RepositoryClient

# The rollout record, kept across a switch.
from tritonrepo_client.control.rollout import PREVIOUS_VERSION_PARAMETER
from tritonrepo_format.config_sets import (
    DEFAULT_SET,
    config_path,
    unknown_set_message,
)
from tritonrepo_format.configs import load_config, tensor_specs

CONFIG_SET_PARAMETER = "tritonrepo_config_set"


class ConfigSwitchError(ClientError):
    """The switch was refused before anything was loaded, or failed and was undone (the message
    says which)."""


@dataclass(frozen=True)
class SwitchStep:
    """One model's reload: ``source`` is the file its config came from, ``seconds`` the load
    time."""

    model: str
    source: str
    seconds: float


def _as_proto(config: dict[str, Any]) -> model_config_pb2.ModelConfig:
    return json_format.ParseDict(config, model_config_pb2.ModelConfig(), ignore_unknown_fields=True)


def _interface(config: model_config_pb2.ModelConfig) -> dict[str, str]:
    """Tensor name -> "input"/"output" and its type and dims: what an ensemble wires to."""
    return {
        name: f"{kind} {spec.describe()}"
        for kind, tensors in (("input", config.input), ("output", config.output))
        for name, spec in tensor_specs(tensors, config.max_batch_size > 0).items()
    }


def interface_change(serving: dict[str, Any], target: dict[str, Any]) -> str | None:
    """A sentence naming the first tensor whose name, kind, data type or dims differ between the
    serving config and the target (both ModelConfig JSON), or None when they agree."""
    old, new = _interface(_as_proto(serving)), _interface(_as_proto(target))
    for name in sorted(set(old) | set(new)):
        if old.get(name) != new.get(name):
            now, then = old.get(name) or "absent", new.get(name) or "absent"
            return f"tensor '{name}' is {now} now, {then} in the target"
    return None


def serving_policy(versions: Sequence[int]) -> dict[str, Any]:
    """The ``version_policy`` (ModelConfig JSON) that serves exactly ``versions``."""
    return {"specific": {"versions": sorted({int(v) for v in versions})}}


def ready_versions(repo: RepositoryClient) -> dict[str, list[int]]:
    """Model -> its READY versions, ascending, from the repository index: the versions that
    serve. (The model-config endpoint is no guide: after a policy-only reload, e.g. a
    rollback, Triton keeps the versions it had loaded with the config they were loaded with,
    and ``get_model_config`` can report ``[1, 2]`` while only 1 is loaded.)"""
    out: dict[str, list[int]] = {}
    for row in repo.index():
        if row.state == "READY" and row.version:
            out.setdefault(row.name, []).append(int(row.version))
    return {name: sorted(versions) for name, versions in out.items()}


def target_config(
    repository: Path,
    model: str,
    config_set: str,
    serving: dict[str, Any],
    versions: Sequence[int] | None = None,
) -> tuple[dict[str, Any], Path]:
    """``model``'s config in ``config_set`` as a load-API override (ModelConfig JSON), with the
    ``tritonrepo_config_set`` parameter; and its file.

    Its ``version_policy`` serves exactly ``versions`` (the READY versions:
    :func:`ready_versions`) when given, else the serving config's ``version_policy``. The
    serving config's rollout record (parameter ``tritonrepo.previous_version``) is kept, so a
    rollback still works after a switch.

    Raises:
        google.protobuf.text_format.ParseError: the file is not a valid ModelConfig.
        FileNotFoundError: the model has no config.pbtxt in ``repository``.
    """
    path = config_path(repository, model, config_set)
    config = json_format.MessageToDict(load_config(path), preserving_proto_field_name=True)
    if versions:
        config["version_policy"] = serving_policy(versions)
    elif "version_policy" in serving:
        config["version_policy"] = copy.deepcopy(serving["version_policy"])
    parameters = config.setdefault("parameters", {})
    previous = serving.get("parameters", {}).get(PREVIOUS_VERSION_PARAMETER)
    if previous is not None:
        parameters[PREVIOUS_VERSION_PARAMETER] = copy.deepcopy(previous)
    parameters[CONFIG_SET_PARAMETER] = {"string_value": config_set}
    return config, path


def current_config_sets(repo: RepositoryClient, models: Sequence[str]) -> dict[str, str]:
    """Model -> the set it was switched to, or ``"as started"`` (no switch since loading)."""
    out = {}
    for model in models:
        parameters = repo.config(model).get("parameters", {})
        out[model] = parameters.get(CONFIG_SET_PARAMETER, {}).get("string_value", "as started")
    return out


def switch_config_set(
    repo: RepositoryClient,
    conn: TritonConnection,
    repository: Path,
    config_set: str,
    served: Sequence[str],
    force: bool = False,
    progress: Callable[[str], None] = lambda _line: None,
) -> list[SwitchStep]:
    """Reload every loaded model of ``repository`` with its config in ``config_set``.

    Args:
        repo: repository client (with the key).
        conn: connection for the health checks and probes.
        repository: local model repository the configs are read from (artifacts must be in the
            server's repository already).
        config_set: ``"cpu"``, ``"torch_gpu"``, ... or ``"default"`` (config.pbtxt).
        served: the served models whose probes gate each step (e.g. the ensembles).
        force: switch even when the health check before it fails.
        progress: called with one line per step.

    Returns:
        One :class:`SwitchStep` per reloaded model, in order.

    Raises:
        ConfigSwitchError: refused (no model has ``configs/<config_set>.pbtxt``, unhealthy
            before, a config that does not parse, a changed interface, nothing to switch) or
            failed and undone.
    """
    named = sorted(Path(repository).glob(f"*/configs/{config_set}.pbtxt"))
    if config_set != DEFAULT_SET and not named:
        raise ConfigSwitchError(unknown_set_message(config_set, Path(repository)))
    served = probed_models(repo, conn, served)
    progress(f"probing {', '.join(served) or 'nothing'} before and after each reload")
    if not force:
        failing = [c for c in check_health(conn, served) if not c.ok]
        if failing:
            raise ConfigSwitchError(
                "health check before the switch failed, nothing changed: "
                + "; ".join(f"{c.name}: {c.detail}" for c in failing)
                + " (--force switches anyway)"
            )
    versions = ready_versions(repo)
    loaded = sorted(versions)
    plan: list[tuple[str, dict[str, Any], dict[str, Any], Path]] = []
    for model in loaded:
        if not (Path(repository) / model / "config.pbtxt").is_file():
            continue  # loaded from elsewhere (a test model, an upload): not part of a set
        # What serves now, with the versions that serve (the reported policy can be stale).
        serving = repo.config(model)
        serving["version_policy"] = serving_policy(versions[model])
        if serving.get("platform") == "ensemble":
            continue  # reloaded by Triton with its steps
        try:
            target, path = target_config(
                repository, model, config_set, serving, versions=versions[model]
            )
        except Exception as exc:
            raise ConfigSwitchError(f"{model}: cannot use its config: {exc}") from None
        change = interface_change(serving, target)
        if change:
            raise ConfigSwitchError(
                f"{model}: {Path(path).name} changes the model's interface ({change}); "
                "the ensembles wired to it would fail between two reloads, so nothing was "
                f"switched: restart the server with --model-config-name={config_set} instead"
            )
        plan.append((model, serving, target, path))
    if not plan:
        raise ConfigSwitchError(f"no loaded model of {repository} to switch")
    done: list[tuple[str, dict[str, Any]]] = []
    steps: list[SwitchStep] = []
    for model, serving, target, path in plan:
        started = time.monotonic()
        try:
            repo.load(model, config=target)
            failing = [c for c in check_health(conn, served) if not c.ok]
            if failing:
                raise ConfigSwitchError(
                    "probe after the reload failed: "
                    + "; ".join(f"{c.name}: {c.detail}" for c in failing)
                )
        except ClientError as exc:
            undo = _undo([*done, (model, serving)], repo)
            raise ConfigSwitchError(
                f"switching {model} to {Path(path).relative_to(repository)} failed: {exc}; {undo}"
            ) from None
        step = SwitchStep(
            model, str(Path(path).relative_to(repository)), time.monotonic() - started
        )
        steps.append(step)
        done.append((model, serving))
        progress(f"{model}: {step.source} ({step.seconds:.1f} s)")
    return steps


def probed_models(
    repo: RepositoryClient | None, conn: TritonConnection, served: Sequence[str] = ()
) -> list[str]:
    """``served``, then every other loaded model whose config declares a probe (parameter
    ``tritonrepo_probe``: :mod:`tritonrepo_client.control.probe_declaration`), by name: what
    this deployment serves, the models whose probes gate a switch, and what
    ``tritonrepo-client health`` checks by default. The loaded models are read from the
    statistics endpoint (:func:`loaded_models`, open without the key) and, with ``repo``, the
    repository index; an index that cannot be read (no key) is skipped.

    Raises:
        ClientError: the statistics cannot be read.
    """
    loaded = set(loaded_models(conn))
    if repo is not None:
        # The index needs the repository key; without it the statistics list what serves.
        with contextlib.suppress(ClientError):
            loaded |= set(ready_versions(repo))
    extra = []
    for model in sorted(loaded):
        if model in served:
            continue
        try:
            parameters = conn.model_config(model).get("parameters", {})
        except ClientError:
            continue  # unloaded in the meantime, or not READY: nothing to probe
        if PROBE_PARAMETER in parameters:
            extra.append(model)
    return [*served, *extra]


def loaded_models(conn: TritonConnection) -> list[str]:
    """Names of the loaded models, from the statistics endpoint (open without the key), which
    also lists models loaded by upload: the repository index lists only the models in the
    server's repository folders.

    Raises:
        ClientError: the statistics cannot be read.
    """
    if conn.protocol == "http":
        stats = conn.call("statistics", lambda: conn.client.get_inference_statistics())
    else:
        stats = conn.call("statistics", lambda: conn.client.get_inference_statistics(as_json=True))
    return sorted({entry["name"] for entry in stats.get("model_stats", [])})


def _undo(done: list[tuple[str, dict[str, Any]]], repo: RepositoryClient) -> str:
    """Reload the configs that were serving, newest first; a sentence saying what happened."""
    failed = []
    for model, serving in reversed(done):
        try:
            repo.load(model, config=serving)
        except ClientError as exc:
            failed.append(f"{model} ({exc})")
    if failed:
        return "putting back the previous configs failed for " + ", ".join(failed)
    return "the previous configs serve again (" + ", ".join(m for m, _ in done) + ")"
