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
version goes live only through ``tritonrepo-client rollout`` (or ``canary`` for an ensemble),
which loads it through the model-control API and rolls back on a failed comparison
(docs/models/add_your_own_model.md, "Version 2 of your model").

Refused, with the reason (:class:`VersionError`): a version the configs serve, the INT8 version
of an ``int8 = true`` core, a version already built (``force`` rebuilds it), a core built by a
``builder`` module, a description of several models, and a core with a ``torch_gpu`` program
(its program is exported from the first version's module).
"""

from __future__ import annotations

import re
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from builders.metadata import BUILD_METADATA_FILE, write_metadata
from builders.pipeline import batch_dims
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
from builders.pipeline.model_configs import INT8_VERSION
from builders.torch_programs import described_export
from tritonrepo.description import DescriptionError, GraphPipeline, Pipeline, import_ref, load
from tritonrepo.paths import MODEL_REPOSITORY, PIPELINES, REPO_ROOT
from tritonrepo.server import stub_numpy


class VersionError(ValueError):
    """A version that cannot be built for this description (the message says why)."""


def refusal(pipeline: Pipeline | GraphPipeline, version: int, repository: Path,
            force: bool = False) -> str | None:  # fmt: skip
    """Why version ``version`` of ``pipeline``'s core cannot be built, or None."""
    if isinstance(pipeline, GraphPipeline):
        return ("a description of several models: build a later version of one of its models "
                "outside the description, or describe it as a pipeline of its own")  # fmt: skip
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


def build_version(
    pipeline: Pipeline, version: int, repository: Path = MODEL_REPOSITORY, force: bool = False
) -> dict[str, Any]:
    """Build version ``version`` of ``pipeline``'s core (module docstring); the metadata
    written.

    Raises:
        VersionError: :func:`refusal` says why not.
        ModelSourceError: the model cannot be obtained.
        ParityError: the batch parity check failed (nothing is written).
        FileNotFoundError: a one-step model has no first version's ``model.py`` to copy.
    """
    why = refusal(pipeline, version, repository, force)
    if why:
        raise VersionError(f"{pipeline.name}: version {version}: {why}")
    core = pipeline.core
    started = time.monotonic()
    model = obtain_model(pipeline, version=version)
    feeds = core_feeds(pipeline, model.SerializeToString())
    freed = batch_dims.free_on_feeds(model, feeds)
    if freed:
        print(batch_dims.note(f"{pipeline.name}: model", freed, batch_dims.batch_rows(feeds)))
    folder = repository / core.model / str(version)
    try:
        figures = write_checked(folder, model.SerializeToString(), feeds)
    except BaseException:
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()  # a version folder made for nothing
        raise
    first = str(core.versions[0])
    for one_step in one_step_models(pipeline, repository):
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
        "source_sha256": source_digest(pipeline),
        "source": core.onnx or f"{core.build}({f'version={version}' if asked else ''})",
        **({"batch_dim_made_dynamic": {k: list(v) for k, v in freed.items()}} if freed else {}),
        "parity_rows": len(next(iter(feeds.values()))),
        "parity_max_abs": figures,
        "seconds": round(time.monotonic() - started, 1),
    }
    artifacts = {"model.onnx": folder / "model.onnx"}
    return write_metadata(folder / BUILD_METADATA_FILE, fields, built_by=BUILT_BY,
                          libraries=LIBRARIES, artifacts=artifacts)  # fmt: skip


def command(names: Sequence[str], version: int, repository: Path, force: bool) -> int:
    """``python -m builders.pipeline.build NAME --version N``: build one later version, one
    line saying what was built; exit 1 with the reason otherwise."""
    if len(names) != 1:
        print("error: --version builds one pipeline's core: name one pipeline", file=sys.stderr)
        return 1
    refused = stub_numpy.refusal("nothing built")
    if refused:
        print(f"error: {refused}", file=sys.stderr)
        return 1
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    try:
        pipeline = load(PIPELINES / names[0] / "pipeline.toml")
        missing = not_generated([pipeline], repository)
        if missing:
            print(f"error: {names[0]}: described but not generated yet; run `make pipeline "
                  f"NAME={names[0]}` first (nothing built)", file=sys.stderr)  # fmt: skip
            return 1
        record = build_version(pipeline, version, repository, force)
    except (DescriptionError, VersionError, ModelSourceError, ParityError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    core = pipeline.core
    print(f"{pipeline.name}: {core.model} version {version} built in {record['seconds']} s, "
          f"batch parity {record['parity_max_abs']}; staged, not served: roll it out with "
          f"`tritonrepo-client rollout` (docs/models/add_your_own_model.md)")  # fmt: skip
    return 0
