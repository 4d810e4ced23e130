"""Build a described pipeline's core with its ``builder`` module (``builder = "package.module"``
in ``[model]``, e.g. image_classification's ``builders.onnx_export.image``), only when it is
stale: what Make's file rules did for it, with nothing written per model.

The sources of a builder are its module and every first-party module it imports, transitively
(imports inside functions included: :func:`module_sources`, read with ``ast``). The build is
up to date when all of these hold:

- the stamp ``build/pipeline-builds/<module>.json`` records the SHA-256 of those sources, and
  it equals the current one;
- every file the stamp records as the builder's output exists;
- every file the preflight requires for the pipeline that ``make artifacts`` builds
  (:func:`tritonrepo.server.preflight.required_artifacts`, in the ``cpu`` set) exists.

Without a stamp (a checkout built by the Makefile's rules before), the files the preflight
requires in the pipeline's own model folders are enough when there are some and each is newer
than every source (Make's rule); the stamp is then written without a build. A pipeline whose
``cpu`` set requires no file of its own (ctr_session: its graph serves only the TensorRT set)
is built. Otherwise ``python -m <module>`` runs (its ``main``), and the stamp
records the digest and the files the run wrote (under ``model_repository/`` and ``build/``;
not those of the model folders the other lane of ``make artifacts`` writes meanwhile).

One builder run serves every pipeline that names the same module. A builder writes its own
files; in a checkout whose artifacts are hard links to another's, remove them before a build.
"""

from __future__ import annotations

import ast
import hashlib
import json
import subprocess
import sys
import time
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any

from tritonrepo.description import Pipeline
from tritonrepo.paths import BUILD_DIR, MODEL_REPOSITORY, REPO_ROOT
from tritonrepo.server.artifact_checks import MAKE_ARTIFACTS
from tritonrepo.server.preflight import required_artifacts

STAMPS = BUILD_DIR / "pipeline-builds"
# Top-level packages of this repository (each in the folder of its name).
FIRST_PARTY = ("tritonrepo", "tritonrepo_client", "builders", "reference_data", "pipelines")
CHECK_SET = "cpu"  # the config set whose files ``make artifacts`` builds
WATCHED = ("model_repository", "build")  # where a builder's outputs are looked for
UNWATCHED = ("build/test-logs", "build/pipeline-builds")  # written by others, not outputs


def module_file(dotted: str, root: Path = REPO_ROOT) -> Path | None:
    """The file of a first-party module or package (``__init__.py``), or None."""
    parts = dotted.split(".")
    if parts[0] not in FIRST_PARTY:
        return None
    base = root.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imported(path: Path, dotted: str) -> Iterable[str]:
    """Dotted names a module imports (any depth; ``from a import b`` yields ``a`` and
    ``a.b``; relative imports resolved)."""
    package = dotted if path.name == "__init__.py" else dotted.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            yield module
            yield from (f"{module}.{a.name}" for a in node.names)


def module_sources(module: str, root: Path = REPO_ROOT) -> list[Path]:
    """The files of ``module`` and of every first-party module it imports, transitively, and
    the ``__init__.py`` of their packages; sorted.

    Raises:
        ModuleNotFoundError: ``module`` is not a module of this repository.
    """
    start = module_file(module, root)
    if start is None:
        raise ModuleNotFoundError(f"builder '{module}' is not a module of this repository")
    seen: dict[Path, str] = {}
    pending = [(start, module)]
    while pending:
        path, dotted = pending.pop()
        if path in seen:
            continue
        seen[path] = dotted
        names = set(_imported(path, dotted))
        for name in list(names):  # the packages above each module run first
            parts = name.split(".")
            names.update(".".join(parts[:i]) for i in range(1, len(parts)))
        for name in names:
            found = module_file(name, root)
            if found is not None and found not in seen:
                pending.append((found, name))
    return sorted(seen)


def sources_digest(paths: Iterable[Path], root: Path = REPO_ROOT) -> str:
    """SHA-256 over each file's path (relative to ``root``) and bytes, in order."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def required_files(pipeline: Pipeline, repository: Path) -> list[Path]:
    """The files the preflight requires for ``pipeline`` in the ``cpu`` set that ``make
    artifacts`` builds (core versions, labels, tokenizers)."""
    required = required_artifacts(repository, [pipeline.name], CHECK_SET)
    return [repository / a.path for a in required if a.build == MAKE_ARTIFACTS]


def _snapshot(root: Path) -> dict[Path, int]:
    """``{file: mtime_ns}`` under the watched folders."""
    files = {}
    for top in WATCHED:
        for path in (root / top).rglob("*"):
            relative = path.relative_to(root).as_posix()
            if path.is_file() and not relative.startswith(UNWATCHED):
                files[path] = path.stat().st_mtime_ns
    return files


def _stamp(module: str) -> Path:
    return STAMPS / f"{module}.json"


def up_to_date(pipeline: Pipeline, repository: Path = MODEL_REPOSITORY) -> tuple[bool, str]:
    """Whether ``pipeline``'s builder need not run (module docstring), and why not when it
    must; writes the stamp of a checkout built before stamps (Make's rule holds)."""
    module = pipeline.core.builder
    assert module is not None, "only a builder core"
    sources = module_sources(module)
    digest = sources_digest(sources)
    required = required_files(pipeline, repository)
    missing = [p for p in required if not p.is_file()]
    if missing:
        return False, f"{missing[0].relative_to(REPO_ROOT)} is missing"
    stamp = _stamp(module)
    if stamp.is_file():
        record = json.loads(stamp.read_text())
        if record.get("source_sha256") != digest:
            return False, "its sources changed"
        gone = [p for p in record.get("outputs", []) if not (REPO_ROOT / p).is_file()]
        return (False, f"{gone[0]} is missing") if gone else (True, "")
    # Make's rule, on the files of the pipeline's own models only (those of a model it calls,
    # e.g. ctr_session's ctr_model, are another builder's): none there means no build yet.
    own = [p for p in required if p.relative_to(repository).parts[0] in pipeline.models]
    newest_source = max(p.stat().st_mtime_ns for p in sources)
    if own and all(p.stat().st_mtime_ns > newest_source for p in own):
        _write_stamp(module, digest, sources, own, seconds=None)
        return True, ""
    return False, "no record of a build from its current sources"


def _write_stamp(
    module: str, digest: str, sources: list[Path], outputs: Iterable[Path], seconds: float | None
) -> dict[str, Any]:
    record = {
        "builder": module,
        "source_sha256": digest,
        "sources": [p.relative_to(REPO_ROOT).as_posix() for p in sources],
        "outputs": sorted({p.relative_to(REPO_ROOT).as_posix() for p in outputs}),
        "seconds": seconds,
    }
    STAMPS.mkdir(parents=True, exist_ok=True)
    _stamp(module).write_text(json.dumps(record, indent=1) + "\n")
    return record


def build(
    pipeline: Pipeline, repository: Path = MODEL_REPOSITORY, others: Collection[str] = ()
) -> dict[str, Any] | None:
    """Run ``pipeline``'s builder module when it is stale; the stamp's record, or None when up
    to date.

    Args:
        pipeline: a description with a ``builder`` core.
        repository: the model repository.
        others: model folders that another build writes meanwhile (``make artifacts`` builds
            the pipelines without a builder module beside the builder modules); files under
            them are not this builder's outputs.

    Raises:
        subprocess.CalledProcessError: the builder exited non-zero (no stamp is written).
    """
    ok, why = up_to_date(pipeline, repository)
    if ok:
        return None
    module = pipeline.core.builder
    assert module is not None
    print(f"{pipeline.name}: python -m {module} ({why})", flush=True)
    before = _snapshot(REPO_ROOT)
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", module], cwd=REPO_ROOT, check=True)
    theirs = tuple(repository / model for model in others)
    written = [
        p
        for p, mtime in _snapshot(REPO_ROOT).items()
        if before.get(p) != mtime and not any(p.is_relative_to(t) for t in theirs)
    ]
    sources = module_sources(module)
    outputs = [*written, *required_files(pipeline, repository)]
    seconds = round(time.monotonic() - started, 1)
    return _write_stamp(module, sources_digest(sources), sources, outputs, seconds)


def built_files(pipelines: Iterable[Pipeline], repository: Path = MODEL_REPOSITORY) -> list[Path]:
    """Every file the builds of ``pipelines`` make that this module knows: the files the
    preflight requires, and the outputs the builder modules' stamps record (``make clean``)."""
    files: set[Path] = set()
    for pipeline in pipelines:
        files.update(required_files(pipeline, repository))
        stamp = _stamp(pipeline.core.builder) if pipeline.core.builder else None
        if stamp is not None and stamp.is_file():
            files.update(REPO_ROOT / p for p in json.loads(stamp.read_text())["outputs"])
    return sorted(files)
