"""The ``text_embedding`` systems: in-process baselines, the naive server, and Triton variants.

Every system embeds the same real texts (:func:`benchmarks.harness.inputs.texts`). Outputs are
checked
against sentence-transformers before anything is timed: a throughput of wrong answers means
nothing. Accuracy is the min cosine to sentence-transformers over all the texts.
"""

from __future__ import annotations

import http.client
import json
import time

import numpy as np
import tritonclient.grpc as grpcclient

from benchmarks.harness import inputs, loadgen
from benchmarks.harness.loadgen import Measurement
from benchmarks.harness.results import IN_PROCESS, System
from benchmarks.harness.settings import Settings
from benchmarks.harness.triton_side import (
    profile,
    serving,
    sweep_steps,
    variant,
    without_dynamic_batching,
)
from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.server.launcher import TritonServer, free_port
from tritonrepo.text import spec
from tritonrepo.text.pooling import l2_normalize
from tritonrepo.text.tokenization import TextTokenizer
from tritonrepo_client import EmbeddingClient

WORKLOAD = "text_embedding"
MIN_COSINE = 0.99  # accuracy floor of a served variant (as the CPU INT8 encoder's build check)
CHECKED = 0.9999  # what the FP32 systems must reach against sentence-transformers
STEPS = (spec.TOKENIZE_MODEL, spec.ENCODER_MODEL, spec.NORMALIZE_MODEL)
VERSION_NAMES = {
    "fp32": "FP32",
    "bf16": "bf16-rounded weights",
    "fp32-fused": "FP32 + ORT transformer fusions",
    "int8": "INT8 weight-only (MatMulNBits)",
}


def min_cosine(got: np.ndarray, reference: np.ndarray) -> float:
    """Min cosine similarity of matching rows of two FP32 ``[n, d]`` arrays."""
    norms = np.linalg.norm(got, axis=1) * np.linalg.norm(reference, axis=1)
    return float(((got * reference).sum(axis=1) / np.maximum(norms, 1e-12)).min())


def require(name: str, cosine: float, floor: float) -> None:
    """Stop the run when a system's outputs are wrong.

    Raises:
        SystemExit: ``cosine`` is below ``floor``.
    """
    if cosine < floor:
        raise SystemExit(f"{name}: outputs are wrong (min cosine {cosine:.6f} < {floor})")


def steps(settings: Settings) -> int:
    """Progress steps of :func:`in_process`, :func:`naive_server` and :func:`triton`."""
    versions = len(spec.ENCODER_VERSIONS)
    return 2 + versions + (2 + 3 + versions) * len(settings.levels)


def in_process(texts: list[str], settings: Settings) -> tuple[list[System], np.ndarray]:
    """sentence-transformers batch 32 and batch 1, and ONNX Runtime batch 32 per version.

    Returns:
        The systems, and sentence-transformers' embeddings of ``texts`` (the reference).
    """
    import onnxruntime as ort
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(spec.source_model_dir()), device="cpu")
    model.encode(texts[:32], batch_size=32)  # warm-up
    started = time.perf_counter()
    reference = model.encode(texts, batch_size=32, normalize_embeddings=True)
    elapsed = time.perf_counter() - started
    nan = float("nan")
    systems = [
        System(
            WORKLOAD,
            "st_b32",
            "sentence-transformers, in-process, batch 32",
            IN_PROCESS,
            "reference",
            [Measurement(0, len(texts) / elapsed, nan, nan, nan, len(texts), 0)],
            "encode(batch_size=32): sorts all texts by length first",
        )
    ]
    settings.progress("sentence-transformers batch 32")
    latencies = []
    for text in texts:
        started = time.perf_counter()
        model.encode([text], normalize_embeddings=True)
        latencies.append(time.perf_counter() - started)
    single = Measurement.from_latencies(0, latencies, sum(latencies), 0)
    systems.append(
        System(
            WORKLOAD,
            "st_b1",
            "sentence-transformers, in-process, batch 1",
            IN_PROCESS,
            "reference",
            [single],
            "one text per encode() call",
        )
    )
    settings.progress("sentence-transformers batch 1")
    tokenizer = TextTokenizer(
        MODEL_REPOSITORY / spec.TOKENIZE_MODEL / "1" / "tokenizer.json", spec.MAX_SEQ_LENGTH
    )
    order = np.argsort([-len(t) for t in texts], kind="stable")
    for version, precision in spec.ENCODER_VERSIONS.items():
        session = ort.InferenceSession(
            str(MODEL_REPOSITORY / spec.ENCODER_MODEL / str(version) / "model.onnx"),
            providers=["CPUExecutionProvider"],
        )
        got = np.zeros_like(reference)

        def encode_all(session=session, got=got) -> None:
            for start in range(0, len(texts), 32):
                rows = order[start : start + 32]
                ids, mask = tokenizer.encode([texts[i] for i in rows])
                (pooled,) = session.run(None, {"input_ids": ids, "attention_mask": mask})
                got[rows] = l2_normalize(pooled)

        encode_all()  # warm-up
        started = time.perf_counter()
        encode_all()
        elapsed = time.perf_counter() - started
        cosine = min_cosine(got, reference)
        systems.append(
            System(
                WORKLOAD,
                f"ort_b32_v{version}",
                f"ONNX Runtime, in-process, batch 32, v{version} {VERSION_NAMES[precision]}",
                IN_PROCESS,
                f"min cos {cosine:.5f}",
                [Measurement(0, len(texts) / elapsed, nan, nan, nan, len(texts), 0)],
                "texts sorted by length, tokenization and pooling included",
                {"min_cosine": cosine},
            )
        )
        settings.progress(f"ONNX Runtime batch 32 v{version}")
    return systems, reference


def naive_servers(
    texts: list[str], reference: np.ndarray, settings: Settings, workers: int
) -> list[System]:
    """FastAPI + sentence-transformers, one text per request, driven by the Python load
    generator at every concurrency level: as set up from FastAPI's docs (PyTorch's default
    threads in every worker), and tuned (one PyTorch thread per worker, so the workers do not
    oversubscribe the cores)."""
    from benchmarks.harness.naive_server import NaiveServer  # FastAPI: only where the baseline runs

    systems = []
    for key, threads in (("naive", None), ("naive_1thread", 1)):
        port = free_port()
        log = settings.workdir / f"{key}_text_server.log"
        with NaiveServer("text", port, workers, log, torch_threads=threads):
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            got = []
            for text in texts[:16]:
                body = json.dumps({"text": text})
                connection.request("POST", "/embed", body, {"Content-Type": "application/json"})
                got.append(json.loads(connection.getresponse().read())["embedding"])
            connection.close()
            cosine = min_cosine(np.asarray(got, dtype=np.float32), reference[:16])
            require("naive server", cosine, CHECKED)
            caller = loadgen.http_json_caller(port, "/embed", lambda text: {"text": text})
            levels = []
            for level in settings.levels:
                levels.append(loadgen.run_closed_loop(caller, texts, level, settings.loadgen_s))
                settings.progress(f"{key} server c={level}")
        tuned = ", torch.set_num_threads(1) per worker" if threads else ""
        systems.append(
            System(
                WORKLOAD,
                key,
                f"FastAPI + sentence-transformers (gunicorn, {workers} uvicorn workers{tuned})",
                "python",
                "reference",
                levels,
                "one text per request"
                + ("" if threads else "; PyTorch's default threads (one per core) in each worker"),
            )
        )
    return systems


def _triton_text_caller(url: str) -> loadgen.CallerFactory:
    def make():
        client = grpcclient.InferenceServerClient(url)

        def call(text: str) -> None:
            tensor = grpcclient.InferInput("TEXT", [1, 1], "BYTES")
            tensor.set_data_from_numpy(np.array([[text.encode("utf-8")]], dtype=object))
            client.infer(spec.ENSEMBLE, [tensor])

        return call, client.close

    return make


def _batch_notes(stats: dict[int, dict]) -> str:
    return "encoder average batch " + ", ".join(
        f"c{level}: {per_model[spec.ENCODER_MODEL].average_batch:.1f}"
        for level, per_model in stats.items()
    )


def triton(
    server: TritonServer, texts: list[str], reference: np.ndarray, settings: Settings
) -> list[System]:
    """The ensemble (every encoder version, batching on and off), the encoder called directly,
    and the Python load generator against the ensemble (the load-source cross-check)."""
    work = settings.workdir
    url = server.options.grpc_url
    text_data = inputs.write_text_data(work / "texts.json", texts)
    profile_level = 16 if 16 in settings.levels else max(settings.levels)
    systems = []

    def served(
        name_key: str,
        name: str,
        accuracy: str,
        values: dict,
        model=spec.ENSEMBLE,
        data=text_data,
        notes: str = "",
    ) -> None:
        done = sweep_steps(
            server,
            model,
            data,
            settings.levels,
            settings.window,
            work,
            STEPS,
            on_level=lambda: settings.progress(name),
        )
        levels, stats, failures = done.measurements(), done.stats(), done.failures
        systems.append(
            System(
                WORKLOAD,
                name_key,
                name,
                "perf_analyzer",
                accuracy,
                levels,
                "; ".join(filter(None, [notes, _batch_notes(stats), *failures])),
                values | profile(stats, profile_level),
            )
        )

    def checked_cosine(name: str, floor: float) -> float:
        with EmbeddingClient(url, "grpc") as client:
            cosine = min_cosine(client.embed(texts), reference)
        require(name, cosine, floor)
        return cosine

    default_version = 1
    cosine = checked_cosine("text_embedding (FP32)", CHECKED)
    served(
        "triton_fp32",
        "Triton text_embedding, dynamic batching, v1 FP32",
        f"min cos {cosine:.5f}",
        {"min_cosine": cosine},
    )

    levels = []
    for level in settings.levels:
        levels.append(
            loadgen.run_closed_loop(_triton_text_caller(url), texts, level, settings.loadgen_s)
        )
        settings.progress(f"cross-check c={level}")
    systems.append(
        System(
            WORKLOAD,
            "triton_fp32_python_load",
            "Triton text_embedding, v1 FP32, Python load generator (cross-check)",
            "python",
            f"min cos {cosine:.5f}",
            levels,
            "same server, other load source",
        )
    )

    with variant(server, dict.fromkeys(STEPS, without_dynamic_batching)):
        cosine = checked_cosine("text_embedding, batching off", CHECKED)
        served(
            "triton_fp32_no_batching",
            "Triton text_embedding, dynamic batching off, v1 FP32",
            f"min cos {cosine:.5f}",
            {"min_cosine": cosine},
        )

    tokenizer = TextTokenizer(
        MODEL_REPOSITORY / spec.TOKENIZE_MODEL / "1" / "tokenizer.json", spec.MAX_SEQ_LENGTH
    )
    tokens = [tuple(a[0] for a in tokenizer.encode([t])) for t in texts]
    token_data = inputs.write_token_data(work / "tokens.json", tokens)
    served(
        "encoder_direct",
        "Triton text_embedding_encoder alone, pre-tokenized, v1 FP32",
        "same engine",
        {},
        model=spec.ENCODER_MODEL,
        data=token_data,
        notes="input_ids/attention_mask of one text per request",
    )

    for version, precision in spec.ENCODER_VERSIONS.items():
        if version == default_version:
            continue
        with variant(server, {spec.ENCODER_MODEL: serving([version])}):
            cosine = checked_cosine(f"encoder v{version}", MIN_COSINE)
            served(
                f"triton_v{version}",
                f"Triton text_embedding, dynamic batching, v{version} {VERSION_NAMES[precision]}",
                f"min cos {cosine:.5f}",
                {"min_cosine": cosine},
            )
    return systems
