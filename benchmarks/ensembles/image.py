"""The ``image_classification`` systems: in-process PyTorch, the naive server, Triton (FP32 and
the INT8 version), and ResNet-50 (random weights) for the classic ResNet-50 comparison.

Inputs are real photographs (``benchmarks.harness.inputs`` is not needed: ``reference_data.photos``
crops, flips and re-lights the scikit-image photos into JPEG files of 150-1400 px, seed 3), one
image per request. Every system decodes, preprocesses and ranks the JPEG itself, with the same
functions (``tritonrepo.image.preprocess`` / ``postprocess``), except the ResNet-50 rows, which
take pre-made pixels (the model alone). Triton is driven by the Python load generator over gRPC
(``benchmarks.harness.loadgen``; perf_analyzer's JSON input data has no clean form for binary BYTES
elements), each worker with its own ``ClassificationClient``. Outputs are checked before timing:
served FP32 top-5 equal to PyTorch's; INT8 reports its top-1 agreement with FP32.
"""

from __future__ import annotations

import time

import numpy as np

from benchmarks.harness import loadgen
from benchmarks.harness.loadgen import Measurement
from benchmarks.harness.naive_server import NaiveServer
from benchmarks.harness.results import IN_PROCESS, System
from benchmarks.harness.settings import Settings
from benchmarks.harness.triton_side import serving, variant
from reference_data import photos
from tritonrepo.image import spec
from tritonrepo.image.preprocess import preprocess_image
from tritonrepo.server.launcher import TritonServer, free_port
from tritonrepo_client import ClassificationClient
from tritonrepo_client.connection import TritonConnection

WORKLOAD = spec.ENSEMBLE
INPUT_SEED = 3
BATCH = 16  # images per forward of the batched in-process rows
RESNET_NOTE = "ResNet-50, RANDOM weights (throughput only), pre-made pixels, no decoding"


def images(count: int) -> list[bytes]:
    """``count`` JPEG files of real photographs (module docstring)."""
    return photos.augmented_files(count, INPUT_SEED)


def steps(settings: Settings) -> int:
    """Progress steps of :func:`in_process`, :func:`naive_servers` and :func:`triton`."""
    return 2 + 4 * len(settings.levels)


def _in_process_system(key, name, seconds, count, latencies=None, notes="") -> System:
    nan = float("nan")
    if latencies is not None:
        level = Measurement.from_latencies(0, latencies, sum(latencies), 0)
    else:
        level = Measurement(0, count / seconds, nan, nan, nan, count, 0)
    return System(WORKLOAD, key, name, IN_PROCESS, "", [level], notes)


def in_process(files: list[bytes], settings: Settings) -> tuple[list[System], object]:
    """PyTorch in this process: EfficientNet-Lite0 one image per forward and ``BATCH`` per
    forward (decoding included), ResNet-50 ``BATCH`` per forward on pre-made pixels.

    Returns:
        The systems and the reference pipeline (``reference_data.image_reference``).
    """
    import torch

    from reference_data.image_reference import ReferencePipeline, resnet50

    pipeline = ReferencePipeline()
    pipeline.top_k(files[:1])  # warm-up
    latencies = []
    for data in files:
        started = time.perf_counter()
        pipeline.top_k([data])
        latencies.append(time.perf_counter() - started)
    started = time.perf_counter()
    for i in range(0, len(files), BATCH):
        pipeline.top_k(files[i : i + BATCH])
    batched = time.perf_counter() - started
    systems = [
        _in_process_system("torch_1", "PyTorch, in-process, 1 image per forward", 0, 0, latencies),
        _in_process_system(
            "torch_16", f"PyTorch, in-process, {BATCH} images per forward", batched, len(files)
        ),
    ]
    settings.progress("PyTorch EfficientNet-Lite0")
    model = resnet50()
    pixels = torch.from_numpy(np.stack([preprocess_image(files[0], spec.RESNET50)] * BATCH))
    with torch.inference_mode():
        model(pixels[:1])
        started = time.perf_counter()
        for _ in range(max(1, len(files) // BATCH)):
            model(pixels)
        seconds = time.perf_counter() - started
    count = max(1, len(files) // BATCH) * BATCH
    systems.append(
        _in_process_system(
            "resnet50_torch_16", f"PyTorch ResNet-50, in-process, {BATCH} per forward",
            seconds, count, notes=RESNET_NOTE,
        )
    )  # fmt: skip
    settings.progress("PyTorch ResNet-50")
    return systems, pipeline


def naive_servers(files: list[bytes], settings: Settings, workers: int) -> list[System]:
    """FastAPI + PyTorch with ``workers`` uvicorn workers, one image per request."""
    port = free_port()
    with NaiveServer("image", port, workers, settings.workdir / "naive_image.log"):
        levels = []
        for level in settings.levels:
            levels.append(
                loadgen.run_closed_loop(
                    loadgen.http_caller(port, "/classify", bytes, "image/jpeg"),
                    files,
                    level,
                    settings.loadgen_s,
                )
            )
            settings.progress(f"naive image c={level}")
    name = f"FastAPI + PyTorch (gunicorn, {workers} uvicorn worker{'s' * (workers > 1)})"
    return [System(WORKLOAD, "naive", name, "python", "", levels, "one image per request")]


def _client_caller(url: str) -> loadgen.CallerFactory:
    def make():
        client = ClassificationClient(url, "grpc")

        def call(data: bytes) -> None:
            client.classify([data], top_k=5)

        return call, client.close

    return make


def _pixels_caller(url: str, pixels: np.ndarray) -> loadgen.CallerFactory:
    def make():
        conn = TritonConnection(url, "grpc")

        def call(_data: bytes) -> None:
            conn.infer(spec.RESNET50_MODEL, {spec.CORE_INPUT: pixels}, [spec.CORE_OUTPUT])

        return call, conn.close

    return make


def _sweep(make, files, settings: Settings, what: str) -> list[Measurement]:
    levels = []
    for level in settings.levels:
        levels.append(loadgen.run_closed_loop(make, files, level, settings.loadgen_s))
        settings.progress(f"{what} c={level}")
    return levels


def triton(server: TritonServer, files: list[bytes], reference, settings: Settings) -> list:
    """image_classification with image_classifier version 1 (FP32) and 2 (INT8), and
    image_classifier_resnet50 called directly.

    Raises:
        SystemExit: the served FP32 top-5 differs from PyTorch's.
    """
    url = server.options.grpc_url
    check = files[: min(len(files), 16)]
    expected_idx, expected_p = reference.top_k(check, 5)
    labels = None
    systems, top1 = [], {}
    for version, precision in spec.CORE_VERSIONS.items():
        with variant(server, {spec.CORE_MODEL: serving([version])}):
            with ClassificationClient(url, "grpc") as client:
                got = client.classify(check, top_k=5)
            if labels is None:
                from tritonrepo.image.labels import read_labels

                labels = read_labels(
                    server.options.model_repository
                    / spec.POSTPROCESS_MODEL
                    / "1"
                    / spec.LABELS_FILE
                )
            names = np.array([[labels[i] for i in row] for row in expected_idx])
            served = np.array([r.labels for r in got])
            top1[version] = float(np.mean(served[:, 0] == names[:, 0]))
            if version == 1:
                worst = float(np.max(np.abs(np.array([r.scores for r in got]) - expected_p)))
                if not np.array_equal(served, names) or worst > 1e-4:
                    raise SystemExit(f"served FP32 top-5 differs from PyTorch (prob {worst:.1e})")
                accuracy = f"top-5 = PyTorch, max prob diff {worst:.1e}"
            else:
                accuracy = f"top-1 agreement with FP32 {top1[version]:.2f} ({len(check)} images)"
            levels = _sweep(_client_caller(url), files, settings, f"Triton v{version}")
        systems.append(
            System(
                WORKLOAD, f"triton_v{version}",
                f"Triton image_classification, v{version} {precision.upper()}",
                "python", accuracy, levels, "one image per request, gRPC",
                {"top1_agreement_vs_pytorch_fp32": top1[version]},
            )
        )  # fmt: skip
    pixels = preprocess_image(files[0], spec.RESNET50)[None]
    levels = _sweep(_pixels_caller(url, pixels), files, settings, "Triton ResNet-50")
    systems.append(
        System(
            WORKLOAD, "resnet50_triton", "Triton image_classifier_resnet50 alone, FP32",
            "python", "", levels, RESNET_NOTE + "; one image per request, gRPC",
        )
    )  # fmt: skip
    return systems
