"""Build the core models of the described pipelines (``make artifacts``).

Usage::

    python -m builders.pipeline.build [NAME ...]    # default: every pipelines/*/pipeline.toml
    python -m builders.pipeline.build --with-calls NAME ...   # and the pipelines they call
    python -m builders.pipeline.build NAME --version 2   # a later version, staged for rollout

Each is built after the pipelines whose models it calls (:mod:`builders.pipeline.build_plan`),
in two lanes at once (:func:`build_in_two_lanes`): the ``builder`` modules, one after another,
beside the other pipelines (``--one-lane``: one pipeline at a time).
A pipeline that is described but not generated yet (a model of it without ``config.pbtxt`` in
the repository) stops the run before anything is built: one line naming ``make pipeline
NAME=<name>``, exit 1, nothing written.

A ``builder`` core (e.g. image_classification's ``builders.onnx_export.image``) is built by
running its module, when its sources changed or a file it makes is missing
(:mod:`builders.pipeline.module_build`). For each description whose core is an ``onnx`` file or
a ``build`` function:

1. the model is obtained (:func:`builders.pipeline.graph.obtain_model`) and written to
   ``<core>/<first served version>/model.onnx``; an output whose fixed first dim the samples
   prove is the batch (onnxmltools' LightGBM ``label``, declared ``[1]``) gets the dynamic
   batch dim first, said in one line and recorded (:mod:`builders.pipeline.batch_dims`);
2. parity: the samples go through the preprocess function, then ONNX Runtime runs the whole
   batch at once and each row alone; every output must agree within ``PARITY_ATOL``
   (:mod:`builders.pipeline.build_record`; a graph whose rows depend on each other, or on the
   batch size, fails here);
3. with ``int8 = true``, version ``INT8_VERSION`` (2) is ONNX Runtime's static INT8 QDQ
   quantization calibrated on the preprocessed samples (MinMax, per-channel symmetric weights);
   its largest deviation from FP32 on the samples is recorded, not gated (it goes live only
   through a rollout);
4. a core whose ``build`` returns a torch module and that has ``[model.torch_gpu]`` is also
   saved as ``module.pt`` beside ``model.onnx``, with the parity feeds: ``make artifacts-gpu``
   exports its program from it (:mod:`builders.torch_programs.described_export`);
5. a description with ``[drift]`` gets its reference profile
   (:mod:`builders.pipeline.drift_profile`);
6. ``build_metadata.json`` records the pipeline, the digest of its sources (description and
   code), the parity figures and the common fields (``builders.metadata``).

A model whose recorded source digest equals the current one is left as it is (so
``make artifacts`` is quick when nothing changed). Exit 1 when a build or parity check fails.

It builds nothing (exit 1) when the Python-backend stubs would import a numpy they cannot
serve with (:mod:`tritonrepo.server.stub_numpy`; numpy 2 with the 2.51 stubs): the models
would not serve, and the parity check and the INT8 calibration would run the preprocess
function under numpy 2's type promotion (NEP 50), not the served steps' numpy 1.26. numpy 2
in this process alone (the stubs pointed at another environment with
``TRITONREPO_STUB_PYTHON``) is not refused.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from builders.metadata import BUILD_METADATA_FILE, write_metadata
from builders.onnx_export.quantization import quantize_qdq
from builders.pipeline import batch_dims, build_version, drift_profile, module_build
from builders.pipeline.build_graph import build_graph
from builders.pipeline.build_plan import build_order, called_pipelines, not_generated, with_calls
from builders.pipeline.build_record import (
    BUILT_BY,
    LIBRARIES,
    ParityError,
    description_path,
    source_digest,
    write_checked,
)
from builders.pipeline.core_feeds import core_feeds, samples_of
from builders.pipeline.graph import ModelSourceError, obtain_model
from builders.pipeline.in_process import InProcess
from builders.pipeline.model_configs import INT8_VERSION
from builders.torch_programs import described_export
from tritonrepo.description import (
    DescriptionError,
    GraphPipeline,
    Pipeline,
    discover,
    load,
)
from tritonrepo.paths import MODEL_REPOSITORY, PIPELINES, REPO_ROOT
from tritonrepo.server import stub_numpy


def rows_agreeing(pipeline: Pipeline, fp32: Path, int8: Path) -> str:
    """``"k/n"``: sample rows whose whole response is the same with the INT8 core as with FP32
    (BYTES and integers equal, floats within 1e-2 relative + 1e-3 absolute): what a caller
    would see change, which the raw tensor deviation does not say (a detector's boxes and
    class scores in one output quantize with one scale)."""
    samples = samples_of(pipeline)
    a, b = (InProcess(pipeline, path)(samples) for path in (fp32, int8))
    rows = len(next(iter(a.values())))
    same = 0
    for i in range(rows):
        equal = True
        for name, value in a.items():
            x, y = np.asarray(value[i]), np.asarray(b[name][i])
            if x.dtype.kind == "f":
                equal &= x.shape == y.shape and bool(np.allclose(x, y, rtol=1e-2, atol=1e-3))
            else:
                equal &= x.shape == y.shape and bool(np.array_equal(x, y))
        same += equal
    return f"{same}/{rows}"


def quantize_int8(fp32: Path, out: Path, feeds: Mapping[str, np.ndarray]) -> float:
    """Static INT8 QDQ quantization of ``fp32`` into ``out``, calibrated on ``feeds`` (the
    preprocessed samples, 8 rows per calibration batch); returns the largest deviation from
    FP32 over the samples' float outputs."""
    import onnxruntime as ort

    rows = len(next(iter(feeds.values())))
    batches = ({k: v[start : start + 8] for k, v in feeds.items()} for start in range(0, rows, 8))
    quantize_qdq(fp32, out, batches)
    deviations = []
    sessions = [
        ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]) for p in (fp32, out)
    ]
    a, b = (s.run(None, dict(feeds)) for s in sessions)
    for x, y in zip(a, b, strict=False):
        if np.asarray(x).dtype.kind == "f":
            deviations.append(float(np.max(np.abs(np.asarray(x) - np.asarray(y)))))
    return max(deviations, default=0.0)


def build(pipeline: Pipeline, repository: Path = MODEL_REPOSITORY) -> dict[str, Any] | None:
    """Build one pipeline's core model (module docstring); None when it is up to date.

    Raises:
        ModelSourceError: the model cannot be obtained.
        ParityError: the batch parity check failed (nothing is left under the served name).
        subprocess.CalledProcessError: a ``builder`` module failed.
    """
    if isinstance(pipeline, GraphPipeline):  # several core models
        return build_graph(pipeline, repository)
    core = pipeline.core
    if core.builder is not None:
        return module_build.build(pipeline, repository)
    folder = repository / core.model / str(core.versions[0])
    digest = source_digest(pipeline)
    metadata_path = folder / BUILD_METADATA_FILE
    saves_module = described_export.exports_program(pipeline)
    built = (folder / "model.onnx").is_file() and metadata_path.is_file()
    built = built and (
        not saves_module or described_export.module_path(repository, pipeline).is_file()
    )
    if built and json.loads(metadata_path.read_text()).get("source_sha256") == digest:
        return None
    started = time.monotonic()
    torch_source: dict[str, Any] = {}
    model = obtain_model(pipeline, torch_source)
    if saves_module and not torch_source:
        raise ModelSourceError(
            f"model.torch_gpu: {core.build}() returned an ONNX model, and a torch.export program "
            "is exported from a torch module: return (torch.nn.Module, {input: example tensor}), "
            "or leave [model.torch_gpu] out"
        )
    feeds = core_feeds(pipeline, model.SerializeToString())
    freed = batch_dims.free_on_feeds(model, feeds)  # a converter's fixed batch dim, made dynamic
    if freed:
        print(batch_dims.note(f"{pipeline.name}: model", freed, batch_dims.batch_rows(feeds)))
    figures = write_checked(folder, model.SerializeToString(), feeds)
    if saves_module:
        path = described_export.module_path(repository, pipeline)
        try:
            described_export.save_module(
                path, torch_source["module"], torch_source["examples"], feeds
            )
        except ValueError as exc:
            raise ModelSourceError(str(exc)) from exc
    fields = {
        "pipeline": pipeline.name,
        "description": description_path(pipeline),
        "source_sha256": digest,
        "source": core.onnx or f"{core.build}()",
        **({"batch_dim_made_dynamic": {k: list(v) for k, v in freed.items()}} if freed else {}),
        "parity_rows": len(next(iter(feeds.values()))),
        "parity_max_abs": figures,
        "seconds": round(time.monotonic() - started, 1),
    }
    record = write_metadata(metadata_path, fields, built_by=BUILT_BY, libraries=LIBRARIES,
                            artifacts={"model.onnx": folder / "model.onnx"})  # fmt: skip
    if core.int8:
        int8_folder = repository / core.model / str(INT8_VERSION)
        int8_folder.mkdir(parents=True, exist_ok=True)
        deviation = quantize_int8(folder / "model.onnx", int8_folder / "model.onnx", feeds)
        agreeing = rows_agreeing(pipeline, folder / "model.onnx", int8_folder / "model.onnx")
        int8_fields = {**fields, "quantization": "ONNX Runtime static QDQ INT8, MinMax",
                       "max_abs_vs_fp32": deviation,
                       "rows_agreeing_end_to_end": agreeing}  # fmt: skip
        int8_file = int8_folder / "model.onnx"
        write_metadata(int8_folder / BUILD_METADATA_FILE, int8_fields, built_by=BUILT_BY,
                       libraries=LIBRARIES, artifacts={"model.onnx": int8_file})  # fmt: skip
    return record


def _described_quietly() -> list[Pipeline]:
    """Every description under ``pipelines/`` that loads (the others are not asked for)."""
    described = []
    for path in discover(PIPELINES):
        try:
            described.append(load(path))
        except DescriptionError:
            continue
    return described


def main(argv: Sequence[str] | None = None) -> int:
    """Command line; exit 0 when every requested pipeline is built or up to date."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="pipelines to build (default: all)")
    parser.add_argument(
        "--with-calls",
        action="store_true",
        help="also build the pipelines whose models the named ones call (make serve MODELS=...)",
    )
    parser.add_argument("--repository", type=Path, default=MODEL_REPOSITORY)
    parser.add_argument(
        "--list-built", action="store_true", help="print the files the builds make, one a line"
    )
    parser.add_argument(
        "--one-lane",
        action="store_true",
        help="build one pipeline at a time (default: the builder modules beside the others)",
    )
    parser.add_argument(
        "--version",
        type=int,
        help="build this later version of one pipeline's core, staged for a rollout "
        "(builders.pipeline.build_version)",
    )
    parser.add_argument("--force", action="store_true", help="with --version: rebuild it")
    parser.add_argument(
        "--core",
        help="with --version, for a description of several models: the [models.<key>] key of "
        "the core to version",
    )
    args = parser.parse_args(argv)
    if args.list_built:
        described = [load(path) for path in discover(PIPELINES)]
        for path in module_build.built_files(described, args.repository):
            print(path.relative_to(REPO_ROOT).as_posix())
        return 0
    refused = stub_numpy.refusal("nothing built")
    if refused:
        print(f"error: {refused}", file=sys.stderr)
        return 1
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    if args.version is not None:
        return build_version.command(
            args.names, args.version, args.repository, args.force, args.core
        )
    paths = [PIPELINES / n / "pipeline.toml" for n in args.names] or discover(PIPELINES)
    failed = 0
    pipelines = []
    for path in paths:
        try:
            pipelines.append(load(path))
        except DescriptionError as exc:
            print(f"error: {path.parent.name}: {exc}", file=sys.stderr)
            failed += 1
    if args.with_calls and args.names:
        pipelines = with_calls(pipelines, _described_quietly())
    missing = not_generated(pipelines, args.repository)
    if missing:  # before anything is built: a built core would make the generator refuse it
        commands = " and ".join(f"`make pipeline NAME={name}`" for name in missing)
        print(f"error: {', '.join(missing)}: described but not generated yet; run {commands} "
              "first (nothing built)", file=sys.stderr)  # fmt: skip
        return 1
    try:
        pipelines = build_order(pipelines)
    except DescriptionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.one_lane:
        failed += sum(not build_and_say(p, args.repository) for p in pipelines)
    else:
        failed += build_in_two_lanes(pipelines, args.repository)
    return 1 if failed else 0


def build_and_say(
    pipeline: Pipeline, repository: Path = MODEL_REPOSITORY, others: Collection[str] = ()
) -> bool:
    """Build ``pipeline`` and its drift profile, one line saying what was done (an error on
    stderr); True unless it failed. ``others``: :func:`builders.pipeline.module_build.build`."""
    try:
        if others and not isinstance(pipeline, GraphPipeline) and pipeline.core.builder:
            record = module_build.build(pipeline, repository, others)
        else:
            record = build(pipeline, repository)
        drift = drift_profile.write(pipeline, repository)
    except (
        DescriptionError, ModelSourceError, ParityError, subprocess.CalledProcessError,
        drift_profile.DriftProfileError,
    ) as exc:  # fmt: skip
        print(f"error: {pipeline.name}: {exc}", file=sys.stderr, flush=True)
        return False
    if drift is not None and drift["changed"]:
        print(f"{pipeline.name}: drift profile of {drift['features']} features written "
              f"to {drift['path']}", flush=True)  # fmt: skip
    if record is None:
        print(f"{pipeline.name}: up to date", flush=True)
    elif "models" not in record and pipeline.core.builder is not None:
        print(f"{pipeline.name}: {pipeline.core.builder} ran in {record['seconds']} s", flush=True)
    else:  # a description of several models records their names
        built = record.get("models") or pipeline.core.model
        print(f"{pipeline.name}: {built} built in {record['seconds']} s, "
              f"batch parity {record['parity_max_abs']}", flush=True)  # fmt: skip
    return True


def has_builder_module(pipeline: Pipeline | GraphPipeline) -> bool:
    """Whether ``pipeline``'s core is built by running a ``builder`` module (a process)."""
    return not isinstance(pipeline, GraphPipeline) and pipeline.core.builder is not None


def build_in_two_lanes(ordered: Sequence[Pipeline], repository: Path = MODEL_REPOSITORY) -> int:
    """Build ``ordered`` (:func:`build_order`'s order) in two lanes at once, each in that order:
    the ``builder`` modules one after another in a thread (each a process of its own:
    ctr_ranking's CTR training, ~4 min, is one), and the other pipelines in this process. A
    pipeline waits for the pipelines whose models it calls, whichever lane builds them (each
    lane follows one order that puts callees first, so neither waits for the other forever).
    A builder module's outputs are what changed under ``build/`` and the model folders outside
    the other lane's (which writes only its own pipelines' model folders and nothing under
    ``build/``). Returns how many failed."""
    needs = called_pipelines(list(ordered))
    done = {p.name: threading.Event() for p in ordered}
    failed: list[str] = []
    in_process = [p for p in ordered if not has_builder_module(p)]
    theirs = tuple(model for p in in_process for model in p.models if model)

    def lane(pipelines: list[Pipeline], others: Collection[str]) -> None:
        for pipeline in pipelines:
            for name in sorted(needs[pipeline.name]):
                done[name].wait()
            try:
                if not build_and_say(pipeline, repository, others):
                    failed.append(pipeline.name)
            except Exception:  # a bug, not a failed build: shown, and the lane goes on
                traceback.print_exc()
                failed.append(pipeline.name)
            finally:
                done[pipeline.name].set()

    modules = threading.Thread(
        target=lane, args=([p for p in ordered if has_builder_module(p)], theirs),
        name="builder modules",
    )  # fmt: skip
    modules.start()
    try:
        lane(in_process, ())
    finally:
        modules.join()
    return len(failed)


if __name__ == "__main__":
    sys.exit(main())
