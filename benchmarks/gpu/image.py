"""The ``image_classification`` rows of ``make bench-gpu``: the served ensemble with the
``torch_gpu`` config set against in-process PyTorch on the same GPU, on the same real photos.

Inputs: ``images`` JPEG files of real photographs (:func:`benchmarks.ensembles.image.images`: the
scikit-image photos cropped, flipped and re-lit, 150-1400 px, seed 3). Throughput is images/s.

Systems, every one from the JPEG file to the top-5 on the host, decoding and preprocessing
included (:func:`tritonrepo.image.preprocess.preprocess_image`, the served step's function):

* PyTorch in this process, EfficientNet-Lite0
  (:func:`reference_data.image_reference.efficientnet_lite0`) eager on the GPU: FP32 at batch 128
  (the accuracy reference) and FP16 (input cast to FP16, logits back to FP32, as the served
  program) at each of ``BATCHES``; preprocessing on this
  process's one thread, as a plain PyTorch loop does. The baseline is the best FP16 batch.
* the same FP16 loop at batch 128 with preprocessing spread over ``POOL_WORKERS`` worker
  processes (a ``DataLoader`` with workers): the host cores the served set gives its
  ``image_preprocess`` instances;
* FP16 at batch 128 on pixels already on the GPU: the model alone, the GPU's ceiling;
* the served ensemble (``image_preprocess`` instances on the host, ``image_classifier`` on the
  GPU, ``image_postprocess`` on the host), one image per request, perf_analyzer over gRPC at
  each concurrency level (``benchmarks.harness.triton_side.sweep_steps``).

Served answers are checked before timing: their top-5 (from ``PROBABILITIES``) against FP32
in-process PyTorch, equal up to near-ties (``builders.torch_programs.image_export.GATES``, the gate
the program passed), and against in-process PyTorch at the program's precision (strictly equal, or
not: reported). ``run_section`` returns the systems; ``summary`` gives the report lines. Run alone:
``python -m benchmarks.gpu.image [--quick] [--device cpu --config-set cpu]`` (the CPU escape hatch
checks the harness on a machine without a GPU).
"""

from __future__ import annotations

import argparse
import base64
import json
import multiprocessing
import struct
import sys
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import numpy as np

from benchmarks.ensembles.image import images
from benchmarks.harness import step_table
from benchmarks.harness.loadgen import Measurement
from benchmarks.harness.perf_analyzer import Window
from benchmarks.harness.results import IN_PROCESS, System
from benchmarks.harness.triton_side import sweep_steps
from builders.torch_programs.image_export import GATES, ranking_mismatches
from tritonrepo.image import spec
from tritonrepo.image.preprocess import preprocess_image
from tritonrepo.paths import BUILD_DIR, MODEL_REPOSITORY
from tritonrepo.runners.torch_runner import METADATA_FILE
from tritonrepo.server.launcher import ServerOptions, TritonServer, free_port
from tritonrepo_format.config_sets import TORCH_GPU_SET

WORKLOAD = spec.ENSEMBLE
BATCHES = (1, 32, 128)
POOL_WORKERS = 8  # image_preprocess instances of configs/torch_gpu.pbtxt
STEPS = (spec.PREPROCESS_MODEL, spec.CORE_MODEL, spec.POSTPROCESS_MODEL)
CHECK_IMAGES = 64  # served answers checked before timing
TOP = 5
QUICK = {"images": 128, "batches": (1, 32), "levels": (1, 4), "window": Window(1000, 999, 3)}
FULL = {"images": 512, "batches": BATCHES, "levels": (1, 16, 64), "window": Window(1000, 25, 4)}
NAN = float("nan")


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)


def _classify(model, pixels, device: str, dtype):
    """FP32 logits ``[b, 1000]`` on the host and top-5 indices of FP32 ``pixels`` ``[b, 3, 224,
    224]`` (numpy), as the served path computes them."""
    import torch

    x = torch.from_numpy(pixels).to(device).to(dtype)
    logits = model(x).float()
    return logits.topk(TOP, dim=1).indices.cpu(), logits.cpu().numpy()


def _loop(model, files: list[bytes], batch: int, device: str, dtype, pool=None):
    """One pass over ``files``: decode + preprocess (on ``pool`` if given), forward, top-5.

    Returns:
        ``(seconds, FP32 logits [n, 1000], per-batch latencies in s)``.
    """
    import torch

    prep = pool.map(preprocess_image, files, chunksize=4) if pool else map(preprocess_image, files)
    logits, latencies = [], []
    _sync(device)
    started = time.perf_counter()
    with torch.inference_mode():
        for start in range(0, len(files), batch):
            t0 = time.perf_counter()
            pixels = np.stack([next(prep) for _ in files[start : start + batch]])
            logits.append(_classify(model, pixels, device, dtype)[1])
            latencies.append(time.perf_counter() - t0)
    _sync(device)
    return time.perf_counter() - started, np.concatenate(logits), latencies


def in_process(files: list[bytes], batches: tuple[int, ...], device: str):
    """The in-process systems of the module docstring.

    Returns:
        ``(systems, {"fp32": logits, "fp16": logits})``, FP32 ``[n, 1000]`` logits per precision
        (FP16 at the largest batch).
    """
    import torch

    from reference_data.image_reference import efficientnet_lite0

    fp32 = efficientnet_lite0().to(device).eval()
    fp16 = efficientnet_lite0().to(device, torch.float16).eval()
    if not device.startswith("cuda"):
        fp16 = fp32  # the CPU escape hatch: FP16 convolutions on a CPU are slow, time FP32
    dtype16 = torch.float16 if device.startswith("cuda") else torch.float32
    warm = files[: min(len(files), 2 * max(batches))]
    for model, dtype in ((fp32, torch.float32), (fp16, dtype16)):
        _loop(model, warm, max(batches), device, dtype)
    systems, logits = [], {}
    seconds, logits["fp32"], _ = _loop(fp32, files, max(batches), device, torch.float32)
    systems.append(_row("torch_fp32", f"PyTorch FP32, in-process, batch {max(batches)}",
                        seconds, files, "reference", {}))  # fmt: skip
    for batch in batches:
        seconds, got, lat = _loop(fp16, files, batch, device, dtype16)
        logits["fp16"] = got
        accuracy, values = _agreement(got, logits["fp32"])
        systems.append(
            _row(
                f"torch_fp16_b{batch}",
                f"PyTorch FP16, in-process, batch {batch}",
                seconds,
                files,
                accuracy,
                values,
                lat if batch == 1 else None,
            )
        )
    # spawn: the workers never touch CUDA, and forking a process that holds a CUDA context is
    # unsafe (PyTorch's multiprocessing notes).
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(POOL_WORKERS, mp_context=context) as pool:
        list(pool.map(preprocess_image, files[:POOL_WORKERS]))  # start the workers
        seconds, got, _ = _loop(fp16, files, max(batches), device, dtype16, pool)
    accuracy, values = _agreement(got, logits["fp32"])
    systems.append(
        _row(
            "torch_fp16_pool",
            f"PyTorch FP16, in-process, batch {max(batches)}, {POOL_WORKERS} preprocessing workers",
            seconds,
            files,
            accuracy,
            values,
            notes="decode + preprocess in a process pool (DataLoader-style)",
        )
    )
    pixels = torch.from_numpy(np.stack([preprocess_image(f) for f in warm])).to(device, dtype16)
    pixels = pixels[: max(batches)].repeat(max(1, max(batches) // len(pixels) + 1), 1, 1, 1)
    pixels = pixels[: max(batches)]
    with torch.inference_mode():
        fp16(pixels)
        _sync(device)
        started, rounds = time.perf_counter(), max(1, len(files) // max(batches))
        for _ in range(rounds):
            fp16(pixels)
        _sync(device)
        seconds = time.perf_counter() - started
    systems.append(
        _row(
            "torch_fp16_model",
            f"PyTorch FP16 model alone, batch {max(batches)}",
            seconds,
            [None] * rounds * max(batches),
            "",
            {},
            notes="pixels already on the device: no decode, no copy (the ceiling)",
        )
    )
    return systems, logits


def _row(key, name, seconds, files, accuracy, values, latencies=None, notes="") -> System:
    if latencies is not None:
        level = Measurement.from_latencies(0, latencies, seconds, 0)
    else:
        level = Measurement(0, len(files) / seconds, NAN, NAN, NAN, len(files), 0)
    notes = notes or "decode + preprocess on this process's one thread, then the GPU"
    return System(WORKLOAD, key, name, IN_PROCESS, accuracy, [level], notes, values)


def _agreement(got: np.ndarray, fp32: np.ndarray) -> tuple[str, dict[str, float]]:
    """Top-5 of ``got`` vs FP32 logits: strict identity and identity up to FP16 near-ties."""
    strict = float(np.mean((_top(got) == _top(fp32)).all(axis=1)))
    ties = 1.0 - len(ranking_mismatches(got, fp32, GATES["fp16"].tie_logits)) / len(got)
    text = f"top-5 = FP32 {strict:.3f} (up to ties {ties:.3f})"
    return text, {"top5_identical_vs_fp32": strict, "top5_up_to_ties_vs_fp32": ties}


def _top(logits: np.ndarray) -> np.ndarray:
    return np.argsort(-logits, axis=1, kind="stable")[:, :TOP]


def served_log_probabilities(url: str, protocol: str, files: list[bytes], workers: int = 16):
    """One request per file to ``image_classification`` (``workers`` in flight): FP32
    ``[n, 1000]`` log of ``PROBABILITIES`` (logits up to a per-row constant), and the served
    ``LABELS`` BYTES ``[n, 5]``.

    Raises:
        tritonclient.utils.InferenceServerException: a request failed.
    """
    if protocol == "grpc":
        import tritonclient.grpc as client_module
    else:
        import tritonclient.http as client_module

    def one(data: bytes):
        client = client_module.InferenceServerClient(url)
        try:
            image = client_module.InferInput("IMAGE", [1, 1], "BYTES")
            image.set_data_from_numpy(np.array([[data]], dtype=np.object_))
            outputs = [client_module.InferRequestedOutput(n) for n in ("PROBABILITIES", "LABELS")]
            result = client.infer(spec.ENSEMBLE, [image], outputs=outputs)
            return result.as_numpy("PROBABILITIES")[0], result.as_numpy("LABELS")[0]
        finally:
            client.close()

    with ThreadPoolExecutor(workers) as pool:
        answers = list(pool.map(one, files))
    probabilities = np.stack([a[0] for a in answers]).astype(np.float64)
    labels = np.stack([a[1] for a in answers])
    return np.log(np.maximum(probabilities, 1e-45)), labels


def write_image_data(path: Path, files: list[bytes]) -> Path:
    """perf_analyzer ``--input-data`` for ``image_classification``: one JPEG per request.
    A BYTES element in ``b64`` is perf_analyzer's serialized form (4-byte little-endian length,
    then the bytes); a bare file is read as a wrong length (measured with perf_analyzer 2.51)."""
    data = [
        {"IMAGE": {"b64": base64.b64encode(struct.pack("<I", len(f)) + f).decode(), "shape": [1]}}
        for f in files
    ]
    path.write_text(json.dumps({"data": data}))
    return path


def precision_served(repository: Path) -> str:
    """The served program's precision from its build metadata (``"onnx"`` without one)."""
    path = repository / spec.CORE_MODEL / "1" / METADATA_FILE
    return json.loads(path.read_text())["precision"] if path.is_file() else "onnx"


def served(server: TritonServer, files, logits, knobs, workdir: Path, precision: str) -> System:
    """The ensemble with one image per request (images/s), after the check of its answers.

    Raises:
        SystemExit: the served top-5 differs from FP32 PyTorch beyond near-ties.
    """
    check = files[: min(len(files), CHECK_IMAGES)]
    got, _labels = served_log_probabilities(server.options.grpc_url, "grpc", check)
    fp32 = logits["fp32"][: len(check)]
    bad = ranking_mismatches(got, fp32, GATES["fp16"].tie_logits)
    if bad:
        raise SystemExit(f"served top-5 differs from FP32 PyTorch beyond ties on images {bad}")
    same = logits["fp16"] if precision == "fp16" else logits["fp32"]
    strict = bool(np.array_equal(_top(got), _top(same[: len(check)])))
    accuracy = f"top-5 {'=' if strict else '≠'} PyTorch {precision.upper()} ({len(check)} images)"
    data = write_image_data(workdir / "images.json", files)
    done = sweep_steps(
        server, spec.ENSEMBLE, data, knobs["levels"], knobs["window"], workdir, STEPS
    )
    measured, stats, failures = done.measurements(), done.stats(), done.failures
    name = f"Triton image_classification, {server.options.model_config_name}, 1 image/request"
    step_table.write(done, workdir / f"steps-{WORKLOAD}.md", f"Per step: {name}")
    batches = ", ".join(f"c{lv}: {s[spec.CORE_MODEL].average_batch:.0f}" for lv, s in stats.items())
    print(f"{name}: " + ", ".join(f"c{m.concurrency} {m.throughput:.0f}" for m in measured))
    for failure in failures:
        print(f"{name}: level not measured: {failure}", flush=True)
    return System(
        WORKLOAD, "triton_gpu_single", name, "perf_analyzer", accuracy, measured,
        "; ".join([f"classifier average batch {batches}", *failures]),
        {"top5_identical_vs_in_process": float(strict), "top5_up_to_ties_vs_fp32": 1.0},
    )  # fmt: skip


def run_section(
    quick: bool,
    out: Path,
    device: str = "cuda:0",
    config_set: str = TORCH_GPU_SET,
    repository: Path = MODEL_REPOSITORY,
) -> list[System]:
    """Every image system of the module docstring; the server's log goes to ``out``.

    Args:
        quick: fewer images, batches and levels (under a minute on an H200).
        out: a directory for the server log, perf_analyzer's CSVs and input data.
        device, config_set, repository: the GPU and the served config set (``cpu`` and
            ``"cpu"`` check the harness on a machine without a GPU).
    """
    knobs = QUICK if quick else FULL
    out.mkdir(parents=True, exist_ok=True)
    files = images(knobs["images"])
    systems, logits = in_process(files, knobs["batches"], device)
    for s in systems:
        print(f"{s.name}: {s.levels[0].throughput:.0f} images/s {s.accuracy}", flush=True)
    options = ServerOptions(
        models=(spec.ENSEMBLE,), model_repository=repository,
        http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
        model_config_name=config_set, log_file=out / "tritonserver-image.log",
    )  # fmt: skip
    with TritonServer(options) as server:
        systems.append(served(server, files, logits, knobs, out, precision_served(repository)))
    return systems


POOLED_GOAL = 2.0  # served peak / in-process FP16 with pooled decoding, the fair baseline


def summary(systems: list[System]) -> list[str]:
    """Markdown lines: the served peak (one image per request) against the fair baseline,
    in-process PyTorch FP16 with decoding and preprocessing in a process pool (as a DataLoader
    does; ratio checked against ≥ ``POOLED_GOAL``×), then against one decoding thread at its best
    batch and the model alone (for reference), and whether the served top-5 equals in-process
    PyTorch's."""
    by_key = {s.key: s for s in systems if s.levels}
    singles = [s for s in systems if s.key.startswith("torch_fp16_b") and s.levels]
    server = next((s for s in systems if s.key == "triton_gpu_single" and s.peak()), None)
    lines = ["## image_classification", ""]
    pooled = by_key.get("torch_fp16_pool")
    if pooled is None or server is None:
        return [*lines, "Not evaluated: a system was not measured (see the log).", ""]
    peak, rate = server.peak(), pooled.levels[0].throughput
    ratio = peak.throughput / rate
    verdict = (
        "met" if ratio >= POOLED_GOAL else f"missed by {100 * (1 - ratio / POOLED_GOAL):.0f} %"
    )
    lines += [
        f"Goal: served ≥ {POOLED_GOAL}× in-process {pooled.name} ({rate:.0f} images/s; decode and "
        "preprocessing included in both, in a process pool there).",
        "",
        f"- {server.name}: {peak.throughput:.0f} images/s at c={peak.concurrency}: "
        f"**{ratio:.2f}×** ({verdict}).",
    ]
    if singles:
        best = max(singles, key=lambda s: s.levels[0].throughput)
        other = best.levels[0].throughput
        lines.append(
            f"- vs {best.name}, decoding on one thread (the best such batch), {other:.0f} "
            f"images/s: {peak.throughput / other:.2f}×."
        )
    if "torch_fp16_model" in by_key:
        other = by_key["torch_fp16_model"].levels[0].throughput
        lines.append(
            f"- vs the model alone (ceiling), {other:.0f} images/s: {peak.throughput / other:.2f}×."
        )
    strict = server.values.get("top5_identical_vs_in_process", 0.0) == 1.0
    lines.append(
        f"- Served top-5 {'identical to' if strict else 'differs from'} in-process PyTorch at "
        f"the program's precision ({server.accuracy}); equal to FP32 up to near-ties."
    )
    return [*lines, ""]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output", type=Path, default=BUILD_DIR / "bench-gpu")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--config-set", default=TORCH_GPU_SET)
    parser.add_argument("--repository", type=Path, default=MODEL_REPOSITORY)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    systems = run_section(args.quick, args.output, args.device, args.config_set, args.repository)
    print("\n".join(summary(systems)))
    print(f"image section: {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
