"""A later version of a described pipeline's core, built from the same description and staged
for a rollout (``python -m builders.pipeline.build NAME --version N``, ``make version``).

The first version is what ``make artifacts`` builds and the configs serve; a retrained or
re-exported model is version 2, 3, ... of the same core, built the same way:

1. the model is obtained as for the first version (:func:`builders.pipeline.graph.obtain_model`):
   a ``build`` function with a ``version`` parameter is called with N (it may train on other
   data, or load other weights), one without is called as it is (the version is what it
   returns now); an ``onnx`` file is read as it is now;
2. the same batch-parity check on the description's samples (a failure leaves nothing);
3. written to ``<core>/<N>/model.onnx`` with ``build_metadata.json`` (the version, the source
   digest, the parity figures, the file's SHA-256);
4. on CPU a described pipeline with one core is one Python model that runs the core's file of
   its own version (:mod:`tritonrepo.pipelines.fused_step`): its ``<name>/<N>/model.py`` is
   copied from the first version's, so Triton can load version N of it too.

Nothing is served yet: the configs' ``version_policy`` still names the served versions, and a
version goes live only through ``tritonrepo-client rollout`` or ``canary``,
which loads it through the model-control API and rolls back on a failed comparison
(docs/models/add_your_own_model.md, "Version 2 of your model").

For a description of several models, one core is versioned at a time (``--core KEY``): its
batch parity is checked on every feed it gets when the samples run through the whole graph in
one process, with the other cores' served versions (what ``make artifacts`` checks for the
first version).

Refused, with the reason (:class:`VersionError`): a version the configs serve, the INT8 version
of an ``int8 = true`` core, a version already built (``force`` rebuilds it), a core built by a
``builder`` module, a graph's version without ``--core`` (or ``--core`` for one core), and a
core with a ``torch_gpu`` program (its program is exported from the first version's module).
"""

from __future__ import annotations

import re
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from builders.metadata import BUILD_METADATA_FILE, write_metadata
from builders.pipeline import batch_dims
from builders.pipeline.build_graph import free_batch_dims
from builders.pipeline.build_plan import not_generated
from builders.pipeline.build_record import (
    BUILT_BY,
    LIBRARIES,
    ParityError,
    description_path,
    source_digest,
    write_checked,
)
from builders.pipeline.core_feeds import core_feeds
from builders.pipeline.graph import ModelSourceError, obtain_model, takes_version
from builders.pipeline.graph_in_process import GraphInProcess
from builders.pipeline.model_configs import INT8_VERSION
from builders.torch_programs import described_export
from tritonrepo.description import DescriptionError, GraphPipeline, Pipeline, import_ref, load
from tritonrepo.paths import MODEL_REPOSITORY, PIPELINES


class VersionError(ValueError):
    """A version that cannot be built for this description (the message says why)."""


def refusal(pipeline: Pipeline | GraphPipeline, version: int, repository: Path,
            force: bool = False, core_key: str | None = None) -> str | None:  # fmt: skip
    """Why version ``version`` of ``pipeline``'s core (of a graph description: its core
    ``core_key``) cannot be built, or None."""
    if isinstance(pipeline, GraphPipeline):
        if core_key not in pipeline.cores:
            return (f"a description of several models: name the core to version with --core "
                    f"(one of {', '.join(pipeline.cores)})")  # fmt: skip
        pipeline = pipeline.core_view(core_key)
    elif core_key is not None:
        return "--core names a core of a description of several models; this one has one core"
    core = pipeline.core
    if version < 1:
        return "give a version number of 1 or more"
    if core.builder is not None:
        return f"its core is built by {core.builder}: version it in that module"
    if described_export.exports_program(pipeline):
        return ("its core has a torch_gpu program, exported from the first version's module: "
                "a later version of it is not built here")  # fmt: skip
    if version in core.versions:
        return (f"version {version} is served (the configs' versions: {list(core.versions)}); "
                "build a new number")  # fmt: skip
    if core.int8 and version == INT8_VERSION:
        return f"version {INT8_VERSION} is the INT8 version of this core (int8 = true)"
    if (repository / core.model / str(version) / "model.onnx").is_file() and not force:
        return (
            f"version {version} is built already ({core.model}/{version}/model.onnx); it "
            "may be live through a rollout: give another number, or --force to rebuild it"
        )
    return None


def one_step_models(pipeline: Pipeline, repository: Path) -> list[Path]:
    """The folders of the one-step CPU models that run ``pipeline``'s core file of their own
    version: a config whose ``core_model`` parameter names the core and that reads its
    ``core_file`` (:mod:`tritonrepo.pipelines.fused_step`)."""
    pattern = re.compile(
        r'key: "core_model" value \{ string_value: "' + re.escape(pipeline.core.model) + '" }'
    )
    found = []
    for folder in sorted(p for p in repository.iterdir() if p.is_dir()):
        configs = [folder / "config.pbtxt", *sorted((folder / "configs").glob("*.pbtxt"))]
        texts = [c.read_text() for c in configs if c.is_file()]
        if any(pattern.search(t) and '"core_file"' in t for t in texts):
            found.append(folder)
    return found


def _graph_feeds(
    graph: GraphPipeline, key: str, model: onnx.ModelProto, repository: Path
) -> tuple[list[dict[str, np.ndarray]], dict[str, Any]]:
    """Every feed core ``key`` gets when the samples run through ``graph`` in one process with
    ``model`` as that core and the other cores' served first versions from ``repository``
    (:class:`builders.pipeline.graph_in_process.GraphInProcess`), and the outputs whose first
    dim was made the dynamic batch dim (``model`` is changed in place then).

    Raises:
        FileNotFoundError: another core is not built (``make artifacts`` builds it).
    """
    models: dict[str, bytes] = {}
    for other, core in graph.cores.items():
        if other != key:
            path = repository / core.model / str(core.versions[0]) / "model.onnx"
            if not path.is_file():
                raise FileNotFoundError(f"{path} is not built; run `make artifacts` first")
            models[other] = path.read_bytes()
    models[key] = model.SerializeToString()
    runner = GraphInProcess(graph, models)
    runner.run(import_ref(graph.samples or "")())
    freed = free_batch_dims(graph, key, models, runner)
    if freed:
        model.CopyFrom(onnx.load_from_string(models[key]))
    return [dict(f) for f in runner.cores[key].feeds], freed


def build_version(
    pipeline: Pipeline | GraphPipeline,
    version: int,
    repository: Path = MODEL_REPOSITORY,
    force: bool = False,
    core_key: str | None = None,
) -> dict[str, Any]:
    """Build version ``version`` of ``pipeline``'s core (of a graph description: its core
    ``core_key``, checked on every feed it gets when the samples run through the graph with the
    others' served versions) as the module docstring says; the metadata written.

    Raises:
        VersionError: :func:`refusal` says why not.
        ModelSourceError: the model cannot be obtained.
        ParityError: the batch parity check failed (nothing is written).
        FileNotFoundError: a one-step model has no first version's ``model.py`` to copy, or
            another core of a graph is not built.
    """
    why = refusal(pipeline, version, repository, force, core_key)
    if why:
        raise VersionError(f"{pipeline.name}: version {version}: {why}")
    graph = pipeline if isinstance(pipeline, GraphPipeline) else None
    single = graph.core_view(core_key or "") if graph is not None else pipeline
    assert isinstance(single, Pipeline)
    core = single.core
    started = time.monotonic()
    model = obtain_model(single, version=version)
    if graph is not None:
        feeds, freed = _graph_feeds(graph, core_key or "", model, repository)
    else:
        one = core_feeds(single, model.SerializeToString())
        found = batch_dims.free_on_feeds(model, one)
        if found:
            print(batch_dims.note(f"{pipeline.name}: model", found, batch_dims.batch_rows(one)))
        feeds, freed = [one], {k: list(v) for k, v in found.items()}
    folder = repository / core.model / str(version)
    try:
        figures = write_checked(folder, model.SerializeToString(), feeds)
    except BaseException:
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()  # a version folder made for nothing
        raise
    first = str(core.versions[0])
    for one_step in [] if graph is not None else one_step_models(single, repository):
        source = one_step / first / "model.py"
        target = one_step / str(version) / "model.py"
        target.parent.mkdir(exist_ok=True)
        shutil.copyfile(source, target)
    asked = core.build is not None and takes_version(import_ref(core.build))
    fields = {
        "pipeline": pipeline.name,
        "description": description_path(pipeline),
        "version": version,
        "staged": "served only through a rollout; the configs serve " + str(list(core.versions)),
        **({"core": core_key} if graph is not None else {}),
        "source_sha256": source_digest(pipeline),
        "source": core.onnx or f"{core.build}({f'version={version}' if asked else ''})",
        **({"batch_dim_made_dynamic": freed} if freed else {}),
        "parity_calls": len(feeds),
        "parity_rows": sum(len(next(iter(f.values()))) for f in feeds),
        "parity_max_abs": figures,
        "seconds": round(time.monotonic() - started, 1),
    }
    artifacts = {"model.onnx": folder / "model.onnx"}
    return write_metadata(folder / BUILD_METADATA_FILE, fields, built_by=BUILT_BY,
                          libraries=LIBRARIES, artifacts=artifacts)  # fmt: skip


def command(
    names: Sequence[str], version: int, repository: Path, force: bool, core_key: str | None = None
) -> int:
    """``python -m builders.pipeline.build NAME --version N`` (its ``main`` checks the stub's
    numpy and puts the checkout on ``sys.path`` first): build one later version, one line
    saying what was built; exit 1 with the reason otherwise."""
    if len(names) != 1:
        print("error: --version builds one pipeline's core: name one pipeline", file=sys.stderr)
        return 1
    try:
        pipeline = load(PIPELINES / names[0] / "pipeline.toml")
        missing = not_generated([pipeline], repository)
        if missing:
            print(f"error: {names[0]}: described but not generated yet; run `make pipeline "
                  f"NAME={names[0]}` first (nothing built)", file=sys.stderr)  # fmt: skip
            return 1
        record = build_version(pipeline, version, repository, force, core_key)
    except (DescriptionError, VersionError, ModelSourceError, ParityError,
            FileNotFoundError) as exc:  # fmt: skip
        print(f"error: {exc}", file=sys.stderr)
        return 1
    core = (pipeline.core_view(core_key or "") if isinstance(pipeline, GraphPipeline)
            else pipeline).core  # fmt: skip
    print(f"{pipeline.name}: {core.model} version {version} built in {record['seconds']} s, "
          f"batch parity {record['parity_max_abs']}; staged, not served: roll it out with "
          f"`tritonrepo-client rollout` (docs/models/add_your_own_model.md)")  # fmt: skip
    return 0
