"""``image_classification`` with the torch_gpu config set on a real server and a real GPU
(``make test-gpu``): decoding where the set's ``image_preprocess`` config says (``decode_device``:
Pillow on the host as shipped, or nvJPEG on the GPU), EfficientNet-Lite0 as a ``torch.export``
program on the GPU, top-K on the host.

References: EfficientNet-Lite0 eager in this process on the same GPU
(``reference_data.image_reference``), in FP32 and in the precision the program was built in
(``torch_metadata.json``). The served answers are compared with it on the pixels the set's
decoder makes. The GPU decoder is compared with the host path (Pillow,
``tritonrepo.image.preprocess``), pixel by pixel and by the reference's answers on each.
Skipped without a CUDA GPU.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from benchmarks.gpu.image import served_log_probabilities
from builders.torch_programs.image_export import GATES, gate_files, ranking_mismatches
from reference_data import photos
from tests.conftest import GPU_SERVER_MARKS, server_options
from tests.top_k import match_top_k
from tritonrepo.image import spec
from tritonrepo.image.decoders import GpuDecoder, HostDecoder
from tritonrepo.image.labels import read_labels
from tritonrepo.image.preprocess import open_batch
from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.runners.torch_runner import METADATA_FILE
from tritonrepo.server.launcher import TritonServer
from tritonrepo_client import ClassificationClient
from tritonrepo_client.control.repository import RepositoryClient
from tritonrepo_format.config_sets import config_path
from tritonrepo_format.configs import load_config

pytestmark = GPU_SERVER_MARKS
PROTOCOLS = ["http", "grpc"]
NAMED = list(photos.PHOTOS) + list(photos.EXTRA)  # the bundled photos
AUGMENTED_SEED = 4  # other crops than the build gate's (seed 2)
TIE = GATES["fp16"].tie_logits  # FP32 logits this close are interchangeable (the build's gate)
# Served probabilities vs PyTorch at the program's precision (builders/tensorrt/image_plan_data.py's
# FP16 and FP32 probability bars).
PROB_ATOL = {"fp16": 1e-2, "fp32": 1e-4}


def program_metadata() -> dict:
    path = MODEL_REPOSITORY / spec.CORE_MODEL / "1" / METADATA_FILE
    if not path.is_file():
        pytest.fail(f"{spec.CORE_MODEL} has no torch program: run `make artifacts-gpu` here")
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def files() -> list[bytes]:
    """The bundled photos, then 48 augmented crops, as JPEG files."""
    named = [photos.photo_file(n) for n in NAMED]
    return named + photos.augmented_files(48, seed=AUGMENTED_SEED)


@pytest.fixture(scope="module")
def image_server():
    """The embedded server with the torch_gpu set and only image_classification."""
    program_metadata()
    options = server_options("gpu-image", model_config_name="torch_gpu", models=(spec.ENSEMBLE,))
    with TritonServer(options) as server:
        yield server


def decode(decoder: GpuDecoder | HostDecoder, files: list[bytes]) -> np.ndarray:
    """FP32 ``[n, 3, 224, 224]``: each file decoded as a request of its own."""
    decoded = decoder.decode([open_batch([f]) for f in files])
    bad = [p for p in decoded if isinstance(p, Exception)]
    assert not bad, bad[:3]
    return np.concatenate(decoded)


@pytest.fixture(scope="module")
def served_pixels(files) -> np.ndarray:
    """The pixels of ``files`` as the set's image_preprocess makes them (its ``decode_device``)."""
    config = load_config(config_path(MODEL_REPOSITORY, spec.PREPROCESS_MODEL, "torch_gpu"))
    device = config.parameters["decode_device"].string_value or "cpu"
    prep = spec.PREPROCESSING[config.parameters["preprocessing"].string_value]
    return decode(GpuDecoder(prep) if device == "cuda" else HostDecoder(prep), files)


@pytest.fixture(scope="module")
def eager():
    """precision -> EfficientNet-Lite0 eager on the GPU in that precision: pixels -> logits."""
    from reference_data.image_reference import efficientnet_lite0

    models = {}
    for precision, dtype in (("fp32", torch.float32), ("fp16", torch.float16)):
        model = efficientnet_lite0().to("cuda", dtype).eval()

        def run(pixels: np.ndarray, model=model, dtype=dtype) -> np.ndarray:
            with torch.inference_mode():
                x = torch.from_numpy(pixels).cuda().to(dtype)
                return model(x).float().cpu().numpy()

        models[precision] = run
    return models


@pytest.fixture(scope="module")
def reference_logits(served_pixels, eager):
    """precision -> FP32 ``[n, 1000]`` logits of the served pixels from eager PyTorch."""
    return {precision: run(served_pixels) for precision, run in eager.items()}


def test_gpu_decoding_is_close_to_the_host_path_and_not_equal(eager):
    """nvJPEG with PyTorch's crop and resize against Pillow's host path on the build gate's 211
    photographs: close (mean pixel difference under one level, a level being 1/128 after
    normalisation; FP32 PyTorch's top-1 the same on at least 95 %), and not the same: measured
    on an H100 (2026-12-07) 0.68 levels on average, up to 176 at edges, top-1 agreement 0.967,
    and the ordered top-5 different beyond near-ties on 46 of 211 (what the docs say of
    ``decode_device = "cuda"``). nvJPEG's inverse DCT and chroma upsampling differ from
    libjpeg-turbo's, and a large JPEG the host decodes at a reduced scale (DCT scaling)."""
    _, gate = gate_files()
    gpu = decode(GpuDecoder(spec.EFFICIENTNET_LITE0), gate)
    host = decode(HostDecoder(spec.EFFICIENTNET_LITE0), gate)
    levels = np.abs(gpu - host) * spec.EFFICIENTNET_LITE0.std[0]
    gpu_logits, host_logits = eager["fp32"](gpu), eager["fp32"](host)
    top1 = float(np.mean(gpu_logits.argmax(axis=1) == host_logits.argmax(axis=1)))
    moved = ranking_mismatches(gpu_logits, host_logits, TIE)
    print(
        f"\n{len(gate)} photos: |pixel difference| mean {levels.mean():.3f} levels, max "
        f"{levels.max():.0f}; top-1 agreement {top1:.3f}; top-5 moved beyond ties on {len(moved)}"
    )
    assert 0 < levels.mean() < 1.0
    assert top1 >= 0.95


def top5(values: np.ndarray) -> np.ndarray:
    return np.argsort(-values, axis=1, kind="stable")[:, :5]


def softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_image_classifier_runs_on_the_gpu(image_server):
    o = image_server.options
    with RepositoryClient(o.http_url, "http", key=o.repository_key or "") as repo:
        config = repo.config(spec.CORE_MODEL)
    assert config["backend"] == "torch_python"
    assert {g["kind"] for g in config["instance_group"]} == {"KIND_GPU"}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_served_top5_equals_in_process_pytorch(image_server, files, reference_logits, protocol):
    """One image per request, 16 in flight (so the dynamic batcher joins them on the GPU)."""
    precision = program_metadata()["precision"]
    want = reference_logits[precision]
    got, labels = served_log_probabilities(image_server.options.url(protocol), protocol, files)
    named = len(NAMED)
    # LABELS name the served PROBABILITIES' top-5, in order (equal probabilities either way).
    names = read_labels(MODEL_REPOSITORY / spec.POSTPROCESS_MODEL / "1" / spec.LABELS_FILE)
    served = [[b.decode() for b in row] for row in labels]
    unordered = {i: match_top_k(row, got[i], names, 0.0)[1] for i, row in enumerate(served)}
    assert not any(unordered.values()), unordered
    # The bundled photos: PyTorch's ordered top-5 in the program's precision, except that
    # classes within that precision's tie (the build's gate) may trade places.
    tie = GATES[precision].tie_logits
    problems = {i: match_top_k(served[i], want[i], names, tie)[1] for i in range(named)}
    assert not any(problems.values()), problems
    # Every photo: top-5 equal to FP32 PyTorch up to near-ties (the build's gate), and the
    # probabilities close to PyTorch's in the program's precision.
    assert ranking_mismatches(got, reference_logits["fp32"], TIE) == []
    np.testing.assert_allclose(np.exp(got), softmax(want), atol=PROB_ATOL[precision], rtol=0)


def test_bulk_request_of_32_images_matches_single_images(image_server, files, reference_logits):
    """One request of the ensemble's max_batch_size images: the same answers per image."""
    precision = program_metadata()["precision"]
    names = read_labels(MODEL_REPOSITORY / spec.POSTPROCESS_MODEL / "1" / spec.LABELS_FILE)
    bulk = files[: spec.MAX_BATCH_SIZE]
    with ClassificationClient(image_server.options.grpc_url, "grpc") as client:
        got = client.classify(bulk, top_k=5)
    want = reference_logits[precision][: len(bulk)]
    fp32 = reference_logits["fp32"][: len(bulk)]
    tie = GATES[precision].tie_logits
    for i, (result, row) in enumerate(zip(got, want, strict=True)):
        if i < len(NAMED):  # PyTorch's ordered top-5 up to near-ties, as one image per request
            assert match_top_k(result.labels, row, names, tie)[1] == [], (NAMED[i], result)
        # Augmented crops: each served label is one of FP32's top-5 or tied with one.
        ranked = {names[c] for c in top5(fp32)[i]}
        tied = {names[c] for c in np.flatnonzero(fp32[i] >= np.sort(fp32[i])[-5] - TIE)}
        assert set(result.labels) <= ranked | tied
