"""Build the TensorRT plans of every core model, checked against their GPU configs and gated.

Usage::

    python -m builders.tensorrt.plans [--model NAME ...] [--precision fp16|int8|fp32]
                                      [--repository DIR] [--version N] [--workspace-gib G]

Models (default: all): every model whose ``config.pbtxt`` is a TensorRT plan
(``builders.pipeline.plan_feeds.plan_models``): ``text_embedding_encoder``, ``ctr_model``,
``ctr_session`` (the step engine with the history as implicit state, from
``ctr_session/1/model.onnx``, ``builders/onnx_export/ctr_session.py``), ``image_classifier``
(EfficientNet-Lite0) and ``image_classifier_resnet50``, and the described pipelines' cores.
Each model's profile, calibration feeds and gate come from one place,
``builders.pipeline.plan_feeds.for_model``: the function its builder module names in
``PLAN_FEEDS`` (``builders/tensorrt/spec_feeds.py``: real texts and click-log rows,
``builders/tensorrt/plan_data.py``; real photographs, ``builders/tensorrt/image_plan_data.py``),
or for a core built from a description's ``onnx``/``build``, its samples
(``builders/pipeline/plan_data.py``). Run it where the plans will serve: a plan is tied to the
TensorRT version and GPU architecture it was built with. ``make build-plans`` runs it in
``nvcr.io/nvidia/tensorrt:26.05-py3`` (TensorRT 10.x, the release of the serving image
``nvcr.io/nvidia/tritonserver:26.05-py3``, ``docker/Dockerfile.builder``) on this machine's GPU;
without TensorRT 10 this module prints one line saying so and exits 1 without writing anything.
NGC 26.06 and later ship TensorRT 11 (docs/deployment/container.md).

Per model, ``build_plan``:

1. reads the GPU ``config.pbtxt`` and the ONNX graph of ``<model>/<version>/model.onnx`` and
   derives optimization profile 0 from them (the model's plan feeds, e.g.
   ``plan_config.model_profile``: max batch = the config's ``max_batch_size``, sequence range
   from the model's spec); the config must agree
   with the graph's I/O and the profile (``plan_config.check_config``/``check_profile``) before
   anything is built;
2. builds the engine with Polygraphy (``network_from_onnx_path``, ``CreateConfig`` with the
   profile, a workspace limit (``--workspace-gib``, default 4 GiB) and the timing cache
   ``build/tensorrt/timing-trt<version>-sm<cc>.cache``, loaded and saved back on every build, so
   later builds on the same TensorRT and GPU reuse the measured tactics). Precision ``fp16``
   sets the FP16 flag; ``int8`` sets INT8 and FP16 (layers without an INT8 kernel run in FP16,
   not FP32) with Polygraphy's ``Calibrator`` (entropy calibration 2) over real samples at the
   profile's OPT shape (the model's plan feeds), writing the calibration cache to
   ``build/tensorrt/<model>-v<version>-int8.calibration.cache``; ``fp32`` sets neither (TF32
   stays off). TensorRT 11 removed the FP16/INT8 flags, so only TensorRT 10.x is accepted;
3. maps the engine's I/O tensors to config entries and fails if the GPU config disagrees
   (data types come from the engine, not from the precision flag);
4. runs the model's accuracy gate: the engine against ONNX Runtime FP32 on the FP32 export
   (version 1), tolerances per precision;
5. writes ``model.plan`` and ``plan_metadata.json`` next to the ONNX file, each through a
   temporary name and a rename, so a failed or interrupted build never leaves a half-written or
   an ungated plan under the served name.

``plan_metadata.json`` holds ``tensorrt_version``, ``gpu_name``, ``compute_capability``
(e.g. ``"9.0"``), ``precision``, ``profiles`` (``[{input: {"min", "opt", "max"}}]``),
``onnx_sha256`` and ``built_at``, plus the engine's I/O, the builder settings and the gate's
figures, and the fields every builder's metadata has (``built_by``, ``versions``, ``sha256``:
``builders.metadata``, which writes the file).

Python dependencies besides TensorRT 10: Polygraphy, onnx, onnxruntime, tokenizers, numpy and
tritonclient[grpc] (config parsing); no PyTorch or scikit-learn. Real texts come from
``build/tensorrt/real_texts.json``, which ``make artifacts`` writes
(``builders.tensorrt.plan_data``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path

from builders.file_digest import sha256
from builders.metadata import write_metadata
from builders.pipeline.plan_feeds import plan_models
from builders.tensorrt import plan_config
from builders.tensorrt.engine import CACHE_DIR, Backend, TensorRTBackend
from tritonrepo.paths import MODEL_REPOSITORY

PRECISIONS = ("fp16", "int8", "fp32")
DEFAULT_PRECISION = "fp16"
REFERENCE_VERSION = 1  # the FP32 ONNX export of every plan model (ctr_session: FP32 network)
WORKSPACE_GIB = 4.0  # builder workspace (scratch memory for tactics); an H200 has 141 GB
PLAN_FILE, METADATA_FILE = "model.plan", "plan_metadata.json"
SUPPORTED_TENSORRT_MAJOR = 10
BUILDER_COMMAND = "make build-plans"
BUILDER_IMAGE = "nvcr.io/nvidia/tensorrt:26.05-py3"
BUILT_BY = "builders.tensorrt.plans"  # this module (``__name__`` under -m: __main__)
LIBRARIES = ("tensorrt", "polygraphy", "onnx", "onnxruntime", "numpy")


class PlanBuildError(RuntimeError):
    """A plan cannot be built as configured (config vs graph or engine, missing input file)."""


def missing_dependencies() -> list[str]:
    """What this machine lacks to build plans, one phrase each; empty when it can.

    Checks that ``tensorrt`` imports and is 10.x (TensorRT 11 removed the FP16/INT8 builder
    flags), and that the other modules a build uses import: Polygraphy, onnx, ONNX Runtime
    (the gate's FP32 reference), tokenizers (text samples) and tritonclient
    (``model_config_pb2``, which parses ``config.pbtxt``).
    """
    missing = []
    try:
        import tensorrt as trt

        version = str(trt.__version__)
        if int(version.split(".")[0]) != SUPPORTED_TENSORRT_MAJOR:
            missing.append(
                f"TensorRT {version} is installed but these plans need TensorRT "
                f"{SUPPORTED_TENSORRT_MAJOR}.x (TensorRT 11 removed the FP16/INT8 builder flags)"
            )
    except Exception:  # ImportError, or a registry stub that fails on import
        missing.append("TensorRT is not installed (no importable `tensorrt` module)")
    for module, why in (
        ("polygraphy", "Polygraphy"),
        ("onnx", "onnx"),
        ("onnxruntime", "ONNX Runtime (the accuracy gate's reference)"),
        ("tokenizers", "tokenizers"),
        ("tritonclient.grpc.model_config_pb2", "tritonclient[grpc] (reads config.pbtxt)"),
    ):
        try:
            __import__(module)
        except ImportError:
            missing.append(f"{why} is not installed")
    return missing


def _temporary(path: Path) -> Path:
    """A temporary sibling of ``path`` with the same suffix (so .gitignore patterns match)."""
    return path.with_name(f".{path.stem}.tmp-{os.getpid()}{path.suffix}")


def build_plan(
    model: str,
    repository: Path,
    precision: str,
    backend: Backend,
    version: int = 1,
    cache_dir: Path = CACHE_DIR,
    log: Callable[[str], None] = print,
) -> dict:
    """Build, check, gate and write ``<repository>/<model>/<version>/model.plan``.

    Args:
        model: a model with plan feeds (``builders.pipeline.plan_feeds.for_model``).
        repository: the model repository (GPU ``config.pbtxt`` and the ONNX files).
        precision: ``"fp16"``, ``"int8"`` or ``"fp32"`` (see the module docstring).
        backend: :class:`TensorRTBackend` (tests pass a stand-in).
        version: the version folder whose ``model.onnx`` is built; the plan goes next to it.
        cache_dir: where the INT8 calibration cache is written.
        log: progress lines.

    Returns:
        The metadata written to ``plan_metadata.json``.

    Raises:
        PlanBuildError: the config disagrees with the ONNX graph, the profile or the engine, or
            the config is not a TensorRT config. Nothing is written.
        accuracy_gate.GateFailed: the engine fails its precision's tolerance. Nothing is written.
        FileNotFoundError: the ONNX file or config is missing (``make artifacts``).
        ValueError: unknown model or precision, or the spec's profile disagrees with the config
            (``plan_feeds.NoPlanFeeds``: no description or builder module owns the model).
    """
    from builders.gates import accuracy_gate
    from builders.pipeline.plan_feeds import for_model
    from tritonrepo_format.configs import load_config

    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    config_file = repository / model / "config.pbtxt"
    cfg = load_config(config_file)
    if cfg.platform != "tensorrt_plan":
        raise PlanBuildError(f"{config_file} is not a TensorRT config (platform {cfg.platform!r})")
    version_dir = repository / model / str(version)
    onnx_path = version_dir / "model.onnx"
    reference_path = repository / model / str(REFERENCE_VERSION) / "model.onnx"
    feeds = for_model(model, repository)
    graph = plan_config.onnx_io(onnx_path)
    profile = feeds.profile(cfg)
    problems = plan_config.check_config(cfg, graph) + plan_config.check_profile(profile, graph, cfg)
    if problems:
        raise PlanBuildError(f"{config_file} does not fit {onnx_path}: {'; '.join(problems)}")

    calibration = feeds.calibration(profile, onnx_path) if precision == "int8" else None
    cache = cache_dir / f"{model}-v{version}-int8.calibration.cache"
    plan, metadata_file = version_dir / PLAN_FILE, version_dir / METADATA_FILE
    temporaries = [_temporary(plan), _temporary(metadata_file), _temporary(cache)]
    with ExitStack() as cleanup:
        for temporary in temporaries:  # left only by a failure; the results are renamed
            cleanup.callback(temporary.unlink, missing_ok=True)
        if calibration is not None:
            cache.parent.mkdir(parents=True, exist_ok=True)
        log(f"{model}: building {precision} from {onnx_path}")
        engine = backend.build(onnx_path, profile, precision, calibration, temporaries[2])

        engine_io = backend.io(engine)
        problems = plan_config.check_config(cfg, engine_io)
        built_profile = backend.profile(engine, list(profile))
        if built_profile != profile:
            problems.append(f"the engine's profile 0 is {built_profile}, expected {profile}")
        if problems:
            raise PlanBuildError(f"the engine does not fit {config_file}: {'; '.join(problems)}")

        log(f"{model}: accuracy gate vs ONNX Runtime FP32 ({reference_path})")
        reference = accuracy_gate.onnxrt_runner(reference_path, "onnxruntime-fp32")
        candidate = backend.runner(engine, f"tensorrt-{precision}")
        accuracy = feeds.gate(reference, candidate, precision, reference_path)
        backend.save(engine, temporaries[0])
        facts = backend.facts()
        metadata = {
            "tensorrt_version": facts["tensorrt_version"],
            "gpu_name": facts["gpu_name"],
            "compute_capability": facts["compute_capability"],
            "precision": precision,
            "profiles": [plan_config.profile_json(profile)],
            "onnx_sha256": sha256(onnx_path),
            "built_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "model": model,
            "version": version,
            "onnx": str(onnx_path.relative_to(repository)),
            "plan_sha256": sha256(temporaries[0]),
            "engine_io": [asdict(t) | {"shape": list(t.shape)} for t in engine_io],
            "builder": backend.settings()
            | {"fp16": precision in ("fp16", "int8"), "int8": precision == "int8"},
            "accuracy": accuracy
            | {"reference": f"ONNX Runtime FP32, {reference_path.relative_to(repository)}"},
        }
        if calibration is not None:
            metadata["calibration"] = {
                "batches": len(calibration),
                "shape": {k: list(v.shape) for k, v in calibration[0].items()},
                "cache": str(cache),
                "source": f"{feeds.source}.calibration_feeds (real samples, OPT shape)",
            }
        metadata = write_metadata(
            temporaries[1],
            metadata,
            built_by=BUILT_BY,
            libraries=LIBRARIES,
            artifacts={PLAN_FILE: temporaries[0]},
        )
        temporaries[0].replace(plan)
        temporaries[1].replace(metadata_file)
        if temporaries[2].is_file():
            temporaries[2].replace(cache)
    log(f"{model}: wrote {plan} ({precision}; {_summary(accuracy)})")
    return metadata


def _summary(accuracy: dict) -> str:
    if "relative_max_abs" in accuracy:
        return f"max relative deviation {accuracy['relative_max_abs']} vs FP32"
    if "min_cosine" in accuracy:
        return f"min cosine {accuracy['min_cosine']:.6f} vs FP32"
    if "top1_agreement" in accuracy:
        return (
            f"top-1 agreement {accuracy['top1_agreement']:.3f}, max abs probability diff "
            f"{accuracy['max_abs_prob_diff']:.2e} vs FP32"
        )
    return (
        f"max abs CTR diff {accuracy['max_abs_ctr_diff']:.2e}, AUC change "
        f"{accuracy['auc_change']:+.5f} vs FP32"
    )


def described_plan_models(repository: Path) -> list[str]:
    """The core models of ``pipelines/*/pipeline.toml`` whose ``config.pbtxt`` is a TensorRT
    plan (one whose graph TensorRT cannot parse is served by ONNX Runtime instead)."""
    from builders.pipeline.plan_data import described_plan_models as described
    from tritonrepo_format.configs import load_config

    names = []
    for model in described():
        config = repository / model / "config.pbtxt"
        if config.is_file() and load_config(config).platform == "tensorrt_plan":
            names.append(model)
    return names


def main(argv: list[str] | None = None) -> int:
    """Command line. Exit 0 when every requested plan was built; 1 with one line per failure
    (or one line naming what is missing when TensorRT 10 is not here)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    models = plan_models(MODEL_REPOSITORY)
    parser.add_argument(
        "--model", action="append", choices=models,
        help="a model to build (repeat for several; default: all)",
    )  # fmt: skip
    parser.add_argument("--precision", choices=PRECISIONS, default=DEFAULT_PRECISION)
    parser.add_argument("--repository", type=Path, default=MODEL_REPOSITORY)
    parser.add_argument("--version", type=int, default=1, help="version folder (default 1)")
    parser.add_argument("--workspace-gib", type=float, default=WORKSPACE_GIB)
    args = parser.parse_args(argv)

    missing = missing_dependencies()
    if missing:
        if any("TensorRT" in m for m in missing):
            fix = (
                f"build the plans in the builder container with `{BUILDER_COMMAND}` (runs this "
                f"module in {BUILDER_IMAGE} on this machine's GPU)"
            )
        else:  # TensorRT 10 is here (the builder image) but a Python dependency is not
            fix = "install the versions requirements.txt pins (pip install -c requirements.txt)"
        print(f"error: {'; '.join(missing)}; {fix}", file=sys.stderr)
        return 1
    from polygraphy.exception import PolygraphyException

    from builders.gates.accuracy_gate import GateFailed

    backend = TensorRTBackend(int(args.workspace_gib * 2**30))
    failed = 0
    for model in args.model or models:
        try:
            build_plan(model, args.repository, args.precision, backend, args.version)
        except (PlanBuildError, GateFailed, FileNotFoundError, ValueError) as exc:
            print(f"error: {model}: {exc}", file=sys.stderr)
            failed += 1
        except PolygraphyException as exc:  # TensorRT parse or build failure
            print(f"error: {model}: TensorRT build failed: {exc}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
