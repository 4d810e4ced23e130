"""Build the production TensorRT plan of ``text_embedding_encoder`` from its ONNX export.

Run it where the plan will be served: inside the NGC ``tritonserver:24.10-py3`` container
(TensorRT 10.x) on the target GPU, since a plan is tied to the TensorRT version and GPU
architecture it was built with. Input: ``text_embedding_encoder/<v>/model.onnx`` (``make
artifacts``). Output: ``model.plan`` + ``plan_metadata.json`` next to it.

The optimization profile is ``tritonrepo.text.spec.PROFILE`` (min/opt/max ``[batch, seq]``
per input), whose max batch equals ``max_batch_size`` in ``config.pbtxt``; a test checks that.
FP16 is on by default (``--precision fp32`` to disable). Uses the TensorRT 10 Python API:
TensorRT 11 removed the ``BuilderFlag.FP16``/``INT8`` flags, so this refuses to run there.

Usage: ``python -m builders.text_embedding_tensorrt [--version N] [--precision fp16|fp32]``
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.text import spec


def build_plan(onnx_path: Path, plan_path: Path, precision: str = "fp16") -> dict:
    """Parse ``onnx_path``, build with profile ``spec.PROFILE``, write ``plan_path``.

    Returns:
        Build metadata (TensorRT version, precision, profile shapes).

    Raises:
        ImportError: TensorRT is not installed.
        RuntimeError: TensorRT ≥ 11, the ONNX parse fails, or the build fails.
    """
    import tensorrt as trt

    if int(trt.__version__.split(".")[0]) >= 11:
        raise RuntimeError(f"TensorRT {trt.__version__}: this builder targets TensorRT 10.x")
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)  # explicit batch is the only mode in TensorRT 10
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise RuntimeError(f"ONNX parse of {onnx_path} failed: {errors}")
    config = builder.create_builder_config()
    if precision == "fp16":
        config.set_flag(trt.BuilderFlag.FP16)
    profile = builder.create_optimization_profile()
    for name, (lo, opt, hi) in spec.PROFILE.items():
        profile.set_shape(name, lo, opt, hi)
    config.add_optimization_profile(profile)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise RuntimeError("TensorRT build failed (see the TensorRT log above)")
    plan_path.write_bytes(bytes(serialized))
    return {
        "tensorrt": trt.__version__,
        "precision": precision,
        "profiles": [{k: {"min": v[0], "opt": v[1], "max": v[2]} for k, v in spec.PROFILE.items()}],
        "onnx": str(onnx_path.name),
        "built_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }


def main(argv: list[str] | None = None) -> int:
    """Command line; exit 1 with a one-line reason when TensorRT or the ONNX file is missing."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repository", type=Path, default=MODEL_REPOSITORY)
    parser.add_argument("--version", type=int, default=1)
    parser.add_argument("--precision", choices=["fp16", "fp32"], default="fp16")
    args = parser.parse_args(argv)
    version_dir = args.repository / spec.ENCODER_MODEL / str(args.version)
    onnx_path = version_dir / "model.onnx"
    if not onnx_path.is_file():
        print(f"error: {onnx_path} is missing; run `make artifacts` first", file=sys.stderr)
        return 1
    try:
        metadata = build_plan(onnx_path, version_dir / "model.plan", args.precision)
    except ImportError:
        print(
            "error: TensorRT is not installed; run this inside nvcr.io/nvidia/tritonserver:"
            "24.10-py3 (see docker/README.md)",
            file=sys.stderr,
        )
        return 1
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    (version_dir / "plan_metadata.json").write_text(json.dumps(metadata, indent=2) + "\n")
    print(f"wrote {version_dir / 'model.plan'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
