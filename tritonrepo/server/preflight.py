"""Check a model repository for one config set before a server starts (``tritonrepo-preflight``).

Triton finds most of these problems only while loading, one model at a time, and some not at
all: a Python model without ``model.py`` stays LOADING until the server restarts
(docs/known_issues.md), a plan built for another GPU fails deep inside the TensorRT backend, and a
``/dev/shm`` too small for the Python instances fails under load, not at start. For the models to
serve and every model they depend on (ensemble steps, models called through BLS), resolved
with ``--model-config-name`` as Triton resolves them:

* the config parses (``ModelConfig`` protobuf) and ensembles are consistent
  (:func:`tritonrepo_format.configs.check_ensemble`);
* every served version has its artifact: ``model.py`` for Python models, the
  ``default_model_filename`` (``model.plan``, ``model.onnx``, ``model.pt2``) otherwise, and the
  tokenizer file a tokenizer step names;
* a TensorRT plan's ``plan_metadata.json`` matches the GPU (compute capability) and TensorRT
  version present, and its profile covers ``max_batch_size``; a ``torch.export`` program's
  metadata matches the PyTorch present and covers ``max_batch_size``;
* config inputs and outputs (names, data types, dims) match the ONNX graph next to a plan or an
  ONNX Runtime model;
* ``/dev/shm`` has room for the Python-backend instances (``SHM_PER_PYTHON_INSTANCE``);
* the command line (not :func:`run`, which is about the repository) checks first the numpy the
  Python-backend stubs would import, with the environment the launcher gives them
  (:mod:`tritonrepo.server.stub_numpy`: the 2.51 stubs need numpy < 2).

Checks that need what this host lacks (a GPU, TensorRT, PyTorch) are reported as skipped, with the
reason. The launcher runs this before starting a server; the container entrypoint runs ``python -m
tritonrepo.server.preflight``. ``--list-artifacts`` prints instead the files these checks require
(:func:`required_artifacts`), one ``<what makes it>\t<path>`` line each, the path relative to the
repository; ``scripts/offline_gpu_host/pack.sh`` packs from the same list
(``builders/gpu_sources.py``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.server import stub_numpy
from tritonrepo.server.artifact_checks import (
    PYTHON_BACKENDS,
    TRACKED,
    Artifact,
    Finding,
    check_model,
    model_artifacts,
)
from tritonrepo_client.control.model_calls import CALLS_PARAMETER, parse_calls
from tritonrepo_format.config_sets import config_path
from tritonrepo_format.configs import ConfigParseError, load_config
from tritonrepo_format.roles import STAGES_PARAMETER

# /dev/shm per Python-backend instance: the largest tensors one batch moves through an
# instance's region here are the encoder's FP32 token embeddings, 64 x 256 x 384 x 4 B = 25 MiB
# (CPU set), in and out again; Triton starts each region at 1 MiB and grows it
# (python_backend README, "Managing Shared Memory"). Docker's default /dev/shm is 64 MB.
SHM_PER_PYTHON_INSTANCE = 32 * 2**20  # bytes


def dependencies(repository: Path, models: Sequence[str], config_name: str | None) -> list[str]:
    """``models`` and, recursively, their ensemble steps, the models they call through BLS
    (declared in their configs: parameter ``tritonrepo_calls``,
    :mod:`tritonrepo_client.control.model_calls`) and the models a one-step model runs in its own
    process (parameter ``tritonrepo_stages``), each once, in order."""
    seen: list[str] = []
    stack = list(models)
    while stack:
        model = stack.pop(0)
        if model in seen:
            continue
        seen.append(model)
        path = config_path(repository, model, config_name)
        if path.is_file():
            try:
                cfg = load_config(path)
            except Exception:  # reported by check_model
                continue
            stack += [s.model_name for s in cfg.ensemble_scheduling.step]
            if CALLS_PARAMETER in cfg.parameters:
                stack += parse_calls(cfg.parameters[CALLS_PARAMETER].string_value)
            if STAGES_PARAMETER in cfg.parameters:
                stack += parse_calls(cfg.parameters[STAGES_PARAMETER].string_value)
    return seen


def python_instances(repository: Path, models: Sequence[str], config_name: str | None) -> int:
    """Python-backend instances (stub processes) the models start, summed over GPUs as 1."""
    total = 0
    for model in models:
        path = config_path(repository, model, config_name)
        try:
            cfg = load_config(path)
        except Exception:
            continue
        if cfg.backend in PYTHON_BACKENDS:
            total += sum(max(g.count, 1) for g in cfg.instance_group) or 1
    return total


def check_shm(instances: int, shm: Path = Path("/dev/shm")) -> Finding:
    """Free space in ``shm`` against ``instances`` × ``SHM_PER_PYTHON_INSTANCE`` bytes."""
    if not shm.is_dir():
        return Finding("skipped", "/dev/shm", f"{shm} does not exist on this host")
    stat = os.statvfs(shm)
    free, need = stat.f_bavail * stat.f_frsize, instances * SHM_PER_PYTHON_INSTANCE
    if free < need:
        return Finding(
            "error",
            "/dev/shm",
            f"{free / 2**20:.0f} MiB free, {need / 2**20:.0f} MiB "
            f"needed for {instances} Python-backend instances "
            f"({SHM_PER_PYTHON_INSTANCE // 2**20} MiB each): start the container with "
            "--shm-size=1g (Docker) or a larger emptyDir (Kubernetes)",
        )
    return Finding(
        "ok", "/dev/shm", f"{free / 2**20:.0f} MiB free for {instances} Python-backend instances"
    )


def check_parsed(repository: Path, model: str, config_name: str | None) -> list[Finding]:
    """:func:`check_model`, but a config that does not parse (the model's own, or for an
    ensemble a step's) is one error, ``<file>:<line>:<column>: <protobuf's reason>``."""
    try:
        path = config_path(repository, model, config_name)
        if path.is_file():
            load_config(path)
        return check_model(repository, model, config_name)
    except ConfigParseError as exc:
        return [Finding("error", model, str(exc))]


def run(repository: Path, models: Sequence[str], config_name: str | None) -> list[Finding]:
    """All findings for ``models`` (and what they depend on) under ``config_name``."""
    findings: list[Finding] = []
    for model in models:
        if not (repository / model).is_dir():
            findings.append(Finding("error", model, f"not in the model repository {repository}"))
    closure = [
        m for m in dependencies(repository, models, config_name) if (repository / m).is_dir()
    ]
    for model in closure:
        findings += [f for f in check_parsed(repository, model, config_name) if f not in findings]
    findings.append(check_shm(python_instances(repository, closure, config_name)))
    return findings


def required_artifacts(
    repository: Path, models: Sequence[str], config_name: str | None
) -> list[Artifact]:
    """Every file :func:`run` requires for ``models`` and what they depend on (ensemble steps,
    models called through BLS) under ``config_name``: each model's config (:data:`TRACKED`),
    then per served version the files of :func:`tritonrepo.server.artifact_checks.model_artifacts`.

    Models missing from the repository, and configs that do not parse, add nothing (:func:`run`
    reports them).
    """
    artifacts: list[Artifact] = []
    for model in dependencies(repository, models, config_name):
        path = config_path(repository, model, config_name)
        if not path.is_file():
            continue
        try:
            cfg = load_config(path)
        except Exception:  # reported by run
            continue
        relative = PurePosixPath(path.relative_to(repository).as_posix())
        artifacts.append(Artifact(model, None, relative, "config", TRACKED))
        artifacts += model_artifacts(repository, model, cfg)
    return artifacts


def main(argv: Sequence[str] | None = None) -> int:
    """Print every finding; exit 1 if any is an error."""
    from tritonrepo.server.options import default_models

    parser = argparse.ArgumentParser(
        prog="tritonrepo-preflight", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--repository", type=Path, default=MODEL_REPOSITORY)
    parser.add_argument(
        "--model",
        dest="models",
        action="append",
        help="model to check with its dependencies (default: the launcher's default models)",
    )
    parser.add_argument(
        "--model-config-name",
        default="cpu",
        help="configs/<name>.pbtxt as Triton resolves it ('' = config.pbtxt)",
    )
    parser.add_argument(
        "--list-artifacts",
        action="store_true",
        help="print the files the checks require, '<make target or tracked>\\t<path>' each",
    )
    args = parser.parse_args(argv)
    config_name = args.model_config_name or None
    models = args.models or default_models(args.repository)
    if args.list_artifacts:
        for artifact in required_artifacts(args.repository, models, config_name):
            print(f"{artifact.build}\t{artifact.path}")
        return 0
    findings = [stub_numpy.check(), *run(args.repository, models, config_name)]
    for finding in findings:
        print(finding.line())
    errors = sum(f.level == "error" for f in findings)
    skipped = sum(f.level == "skipped" for f in findings)
    print(f"preflight: {errors} errors, {skipped} checks skipped on this host")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
