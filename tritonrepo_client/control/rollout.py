"""Zero-downtime version rollout and rollback of a model in explicit model-control mode.

``rollout(model, N)``:

1. read the serving versions (repository index) and the effective config;
2. stage N next to them: load with a config override whose ``version_policy`` lists both
   (``specific: [old..., N]``); N's files are either already in the server's repository or
   uploaded through the load API's file override (``source_dir``) — Triton then replaces the
   model's folder with the upload, so every listed version is uploaded;
3. canary: send the probe set pinned to N and to the serving version and compare (a
   :class:`Canary`: tolerance on outputs, cosine of embeddings, or your own check);
4. switch the policy to N alone; Triton unloads the old version once its in-flight requests
   finish, and this waits for that;
5. check every ensemble that uses the model is READY, reloading any that is not.

If a step fails, the previous config with a policy naming the versions that were serving (and,
in upload mode, their files) is loaded again and :class:`RolloutError` says which step failed
and why. The repository index, not ``get_model_config``, is the truth about which versions
serve: after a policy-only reload Triton keeps already-loaded versions with the config they were
loaded with. The override config records the version
it replaced (parameter ``tritonrepo.previous_version``), so ``rollback(model)`` can return to it
from any machine.

Triton facts this relies on (2.51): a reload keeps serving the old versions until the new
config has loaded (and a failed load leaves them serving); ensemble steps with
``model_version: -1`` use the highest READY version, so ensemble traffic moves to N as soon as N
is loaded next to a lower version (during the canary), and moves back if the canary fails.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from tritonrepo_client.connection import ClientError, TritonConnection
from tritonrepo_client.control.repository import RepositoryClient

PREVIOUS_VERSION_PARAMETER = "tritonrepo.previous_version"


class RolloutError(ClientError):
    """A rollout step failed; the previous policy was restored (the message says so)."""


@dataclass(frozen=True)
class CanaryResult:
    """Outcome of a canary comparison; ``detail`` gives the figures."""

    ok: bool
    detail: str


class Canary(Protocol):
    """Compares version ``new`` with the serving version ``old`` of ``model``."""

    def compare(self, conn: TritonConnection, model: str, old: int, new: int) -> CanaryResult:
        """Send probe requests pinned to each version and judge the difference."""
        ...


@dataclass
class TensorCanary:
    """Probe inputs sent to both versions; outputs must satisfy ``np.allclose(atol, rtol)``.

    Args:
        inputs: ``{input name: array with batch dim}``, as :meth:`TritonConnection.infer` takes.
        outputs: output names to compare.
    """

    inputs: dict[str, np.ndarray]
    outputs: Sequence[str]
    atol: float = 1e-3
    rtol: float = 1e-3

    def compare(self, conn: TritonConnection, model: str, old: int, new: int) -> CanaryResult:
        """Max abs difference per output; fails when any exceeds the tolerance."""
        a = conn.infer(model, self.inputs, self.outputs, model_version=str(old))
        b = conn.infer(model, self.inputs, self.outputs, model_version=str(new))
        diffs = {n: float(np.max(np.abs(a[n].astype(np.float64) - b[n]))) for n in self.outputs}
        ok = all(np.allclose(a[n], b[n], atol=self.atol, rtol=self.rtol) for n in self.outputs)
        text = ", ".join(f"{n} max abs diff {d:.3g}" for n, d in diffs.items())
        return CanaryResult(ok, f"{text} (atol {self.atol}, rtol {self.rtol})")


@dataclass
class EmbeddingCanary:
    """For a text-embedding encoder: tokenize probe texts with the server's tokenizer model,
    run both encoder versions, L2-normalise their pooled outputs and require cosine
    ≥ ``min_cosine`` for every text."""

    texts: Sequence[str]
    min_cosine: float = 0.99
    tokenizer_model: str = "text_embedding_tokenize"
    encoder_output: str = "sentence_embedding"  # FP32 [batch, 384], the masked mean

    def compare(self, conn: TritonConnection, model: str, old: int, new: int) -> CanaryResult:
        """Min cosine over the probe texts between the two versions' sentence embeddings."""
        text = np.array([t.encode() for t in self.texts], dtype=object).reshape(-1, 1)
        tokens = conn.infer(self.tokenizer_model, {"TEXT": text}, ["input_ids", "attention_mask"])
        pooled = []
        for version in (old, new):
            out = conn.infer(model, tokens, [self.encoder_output], model_version=str(version))
            vectors = out[self.encoder_output].astype(np.float32)
            pooled.append(vectors / np.linalg.norm(vectors, axis=1, keepdims=True).clip(1e-12))
        cosines = (pooled[0] * pooled[1]).sum(axis=1)
        worst = float(cosines.min())
        return CanaryResult(
            worst >= self.min_cosine,
            f"min cosine {worst:.6f} (1 - cos = {1 - worst:.1e}) over {len(self.texts)} "
            f"probe texts (required ≥ {self.min_cosine})",
        )


DEFAULT_PROBE_TEXTS = (
    "A man is eating food.",
    "The quick brown fox jumps over the lazy dog.",
    "Triton batches requests dynamically.",
    "Ünïcödé text and numbers 3.14.",
)

# Canary per model when none is given.
DEFAULT_CANARIES: dict[str, Canary] = {
    "text_embedding_encoder": EmbeddingCanary(DEFAULT_PROBE_TEXTS),
}


@dataclass
class RolloutReport:
    """What a rollout did: versions before/after, canary figures, repaired ensembles."""

    model: str
    previous: list[int]
    version: int
    canary: CanaryResult | None
    dependents: dict[str, str] = field(default_factory=dict)
    steps: list[str] = field(default_factory=list)
    seconds: float = 0.0


def version_files(source_dir: Path, versions: Sequence[int]) -> dict[str, bytes]:
    """``{"file:<v>/<relative path>": content}`` for every file under ``source_dir/<v>/``.

    Raises:
        RolloutError: a version folder is missing or empty.
    """
    files: dict[str, bytes] = {}
    for version in versions:
        folder = Path(source_dir) / str(version)
        found = [p for p in sorted(folder.rglob("*")) if p.is_file()] if folder.is_dir() else []
        if not found:
            raise RolloutError(
                f"{folder} has no files: uploading replaces the model's folder on the server, so "
                f"every version of the new policy ({', '.join(map(str, versions))}) must be there"
            )
        for path in found:
            files[f"file:{version}/{path.relative_to(folder).as_posix()}"] = path.read_bytes()
    return files


def with_policy(config: dict[str, Any], versions: Sequence[int], previous: int) -> dict[str, Any]:
    """A copy of ``config`` serving exactly ``versions`` and recording ``previous``."""
    new = copy.deepcopy(config)
    new["version_policy"] = {"specific": {"versions": sorted(set(versions))}}
    new.setdefault("parameters", {})[PREVIOUS_VERSION_PARAMETER] = {"string_value": str(previous)}
    return new


def dependent_ensembles(repo: RepositoryClient, model: str) -> list[str]:
    """READY ensembles with a step that runs ``model``."""
    names = sorted({r.name for r in repo.index() if r.state == "READY" and r.name != model})
    found = []
    for name in names:
        cfg = repo.config(name)
        steps = cfg.get("ensemble_scheduling", {}).get("step", [])
        if cfg.get("platform") == "ensemble" and any(s["model_name"] == model for s in steps):
            found.append(name)
    return found


def _repair(repo: RepositoryClient, ensembles: Sequence[str]) -> dict[str, str]:
    status = {}
    for name in ensembles:
        if repo.ready(name):
            status[name] = "READY throughout"
        else:
            repo.load(name)
            status[name] = "was not READY; reloaded" + (
                "" if repo.ready(name) else " but still down"
            )
    return status


def rollout(
    repo: RepositoryClient,
    model: str,
    version: int,
    source_dir: Path | None = None,
    canary: Canary | None = None,
    drain_timeout_s: float = 120.0,
) -> RolloutReport:
    """Move ``model`` to ``version`` without dropping requests (see the module docstring).

    Args:
        repo: client with the model-repository key.
        model: the model to roll (e.g. ``text_embedding_encoder``), not an ensemble.
        version: version to serve.
        source_dir: local model folder (holding ``<version>/`` folders) to upload from; ``None``
            when ``version`` is already in the server's repository.
        canary: comparison that gates the switch; ``DEFAULT_CANARIES[model]`` when ``None``.
        drain_timeout_s: seconds to wait for the old version's in-flight requests.

    Returns:
        A report of the rollout.

    Raises:
        RolloutError: an unknown model (the closest names in the server's index suggested),
            nothing to do, or a step failed (the previous config has been restored).
    """
    start = time.monotonic()
    index = repo.index()
    serving = sorted(int(r.version) for r in index if r.name == model and r.state == "READY")
    if not serving:
        names = sorted({r.name for r in index})
        if model not in names:
            from tritonrepo_client.control.load_checks import unknown_model

            refusal = unknown_model(model, names, "the server's repository index")
            raise RolloutError(str(refusal))
        raise RolloutError(f"model '{model}' has no READY version; load it first")
    if serving == [version]:
        raise RolloutError(f"model '{model}' already serves version {version} alone")
    old = max(v for v in serving if v != version) if set(serving) - {version} else serving[0]
    previous_config = repo.config(model)
    # The restore config names the serving versions explicitly: after a policy-only reload
    # Triton 2.51 keeps the already-loaded versions and their config, so the version_policy
    # that get_model_config reports can be stale (seen: [1, 2] while only 1 was loaded).
    restore_config = copy.deepcopy(previous_config)
    restore_config["version_policy"] = {"specific": {"versions": serving}}
    canary = canary if canary is not None else DEFAULT_CANARIES.get(model)
    both = sorted(set(serving) | {version})
    # Upload mode: read (and so check) every needed folder once, before touching the server.
    staged_files = version_files(source_dir, both) if source_dir else None

    def subset(versions: Sequence[int]) -> dict[str, bytes] | None:
        if staged_files is None:
            return None
        prefixes = tuple(f"file:{v}/" for v in versions)
        return {k: v for k, v in staged_files.items() if k.startswith(prefixes)}

    restore_files = subset(serving)
    final_files = subset([version])
    ensembles = dependent_ensembles(repo, model)
    report = RolloutReport(model, serving, version, None)
    step = "stage"
    try:
        repo.load(model, with_policy(previous_config, both, old), staged_files)
        if not repo.ready(model, str(version)):
            raise RolloutError(f"version {version} did not become READY")
        report.steps.append(f"loaded version {version} next to {serving}")
        step = "canary"
        if canary is not None:
            report.canary = canary.compare(repo.connection, model, old, version)
            report.steps.append(f"canary: {report.canary.detail}")
            if not report.canary.ok:
                raise RolloutError(f"canary rejected version {version}: {report.canary.detail}")
        step = "switch"
        repo.load(model, with_policy(previous_config, [version], old), final_files)
        report.steps.append(f"policy switched to [{version}]")
        step = "drain"
        gone = [v for v in serving if v != version]
        repo.wait_until(model, gone, drain_timeout_s)
        report.steps.append(f"version(s) {gone} drained and unloaded")
        step = "ensembles"
        report.dependents = _repair(repo, ensembles)
    except Exception as exc:  # any failure, a custom canary's included, restores the policy
        try:
            repo.load(model, restore_config, restore_files)
            repo.wait_until(model, [v for v in both if v not in serving], drain_timeout_s)
            _repair(repo, ensembles)
            restored = f"restored the previous policy (serving {repo.versions(model)})"
        except (ClientError, TimeoutError) as again:
            restored = f"and restoring the previous config failed too: {again}"
        raise RolloutError(
            f"rollout of {model} to version {version} failed at {step}: {exc}; {restored}"
        ) from None
    report.seconds = time.monotonic() - start
    return report


def recorded_previous(config: dict[str, Any]) -> int | None:
    """The version a rollout recorded in ``config`` as replaced (:func:`with_policy`), or None."""
    value = config.get("parameters", {}).get(PREVIOUS_VERSION_PARAMETER, {}).get("string_value")
    return int(value) if value else None


def previous_version(repo: RepositoryClient, model: str) -> int:
    """The version the last rollout of ``model`` replaced.

    Raises:
        RolloutError: the model was not rolled out since it was loaded.
    """
    previous = recorded_previous(repo.config(model))
    if previous is None:
        raise RolloutError(f"model '{model}' has no rollout to roll back (no previous version)")
    return previous


def rollback(
    repo: RepositoryClient,
    model: str,
    source_dir: Path | None = None,
    canary: Canary | None = None,
    drain_timeout_s: float = 120.0,
) -> RolloutReport:
    """Roll ``model`` back to the version its last rollout replaced, the same way as
    :func:`rollout` (staged next to the current one, canary, switch, drain).

    Raises:
        RolloutError: no previous version is recorded, or a step failed.
    """
    return rollout(repo, model, previous_version(repo, model), source_dir, canary, drain_timeout_s)
