"""Build the core models of a graph description (``[models.<key>]``; called by
:func:`builders.pipeline.build.build`).

For each core (an ``onnx`` file or a ``build`` function): the model is written to
``<core>/<first served version>/model.onnx``; the samples run through the whole chain in one
process (:class:`builders.pipeline.graph_in_process.GraphInProcess`), which records every
feed each core gets (as an ensemble step or through a step's calls), and the batch parity
check of :func:`builders.pipeline.build_record.parity` runs on each of those feeds (an output whose
fixed first dim the samples prove is the batch gets the dynamic batch dim first:
:mod:`builders.pipeline.batch_dims`); then
``build_metadata.json`` records the pipeline, the source digest and the figures. A core whose
recorded digest equals the current one is left as it is.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from builders.metadata import BUILD_METADATA_FILE, write_metadata
from builders.pipeline import batch_dims
from builders.pipeline.build_record import (
    BUILT_BY,
    LIBRARIES,
    description_path,
    parity,
    source_digest,
)
from builders.pipeline.graph import obtain_model
from builders.pipeline.graph_in_process import GraphInProcess
from tritonrepo.description import GraphPipeline, import_ref


def build_graph(pipeline: GraphPipeline, repository: Path) -> dict[str, Any] | None:
    """Build every core of ``pipeline`` (module docstring); None when all are up to date.

    Raises:
        ModelSourceError: a model cannot be obtained.
        ParityError: a batch parity check failed (nothing is left under the served name).
    """
    digest = source_digest(pipeline)
    folders = {k: repository / c.model / str(c.versions[0]) for k, c in pipeline.cores.items()}

    def current(folder: Path) -> bool:
        meta = folder / BUILD_METADATA_FILE
        return (
            (folder / "model.onnx").is_file()
            and meta.is_file()
            and json.loads(meta.read_text()).get("source_sha256") == digest
        )

    if all(current(f) for f in folders.values()):
        return None
    started = time.monotonic()
    models = {k: obtain_model(pipeline.core_view(k)).SerializeToString() for k in pipeline.cores}
    runner = GraphInProcess(pipeline, models)
    runner.run(import_ref(pipeline.samples or "")())
    freed = {key: free_batch_dims(pipeline, key, models, runner) for key in pipeline.cores}
    figures: dict[str, dict[str, float]] = {}
    for key, core in pipeline.cores.items():
        folder = folders[key]
        folder.mkdir(parents=True, exist_ok=True)
        staged = folder / "model.onnx.tmp"
        staged.write_bytes(models[key])
        try:
            for feeds in runner.cores[key].feeds:
                for name, value in parity(staged, feeds).items():
                    figures.setdefault(core.model, {})[name] = max(
                        value, figures.get(core.model, {}).get(name, 0.0)
                    )
        except BaseException:
            staged.unlink(missing_ok=True)
            raise
        target = folder / "model.onnx"
        target.unlink(missing_ok=True)  # never write into a hard-linked file in place
        staged.replace(target)
        fields = {
            "pipeline": pipeline.name,
            "description": description_path(pipeline),
            "source_sha256": digest,
            "source": core.onnx or f"{core.build}()",
            **({"batch_dim_made_dynamic": freed[key]} if freed[key] else {}),
            "parity_calls": len(runner.cores[key].feeds),
            "parity_max_abs": figures.get(core.model, {}),
            "seconds": round(time.monotonic() - started, 1),
        }
        write_metadata(
            folder / BUILD_METADATA_FILE,
            fields,
            built_by=BUILT_BY,
            libraries=LIBRARIES,
            artifacts={"model.onnx": target},
        )
    return {
        "models": ", ".join(c.model for c in pipeline.cores.values()),
        "seconds": round(time.monotonic() - started, 1),
        "parity_max_abs": figures,
    }


def free_batch_dims(
    pipeline: GraphPipeline, key: str, models: dict[str, bytes], runner: GraphInProcess
) -> dict[str, list[int | None]]:
    """Core ``key``'s outputs whose fixed first dim its last call on the samples proves is the
    batch, made dynamic in ``models[key]`` (replaced; :mod:`builders.pipeline.batch_dims`) and
    said in one line: ``{output: the shape declared before}`` (empty: unchanged)."""
    import onnx

    feeds = runner.cores[key].feeds
    if not feeds:
        return {}
    model = onnx.load_from_string(models[key])
    freed = batch_dims.free_on_feeds(model, feeds[-1])
    if freed:
        models[key] = model.SerializeToString()
        rows = batch_dims.batch_rows(feeds[-1])
        print(batch_dims.note(f"{pipeline.name}: models.{key}", freed, rows))
    return {name: list(shape) for name, shape in freed.items()}
