"""The ``ctr_ranking`` and ``ctr_session`` systems: in-process PyTorch, the naive server, Triton.

Inputs are held-out click-log users (:func:`benchmarks.harness.inputs.ctr_inputs`); each request
ranks a
slate of ``CANDIDATES_PER_REQUEST`` items. Accuracy is the held-out AUC, computed from the
served ``ctr_model`` version itself (pinned, on the held-out rows), next to the FP32 AUC.
Outputs are checked against the PyTorch network before timing.
"""

from __future__ import annotations

import itertools
import threading
import time

import numpy as np

from benchmarks.harness import inputs, loadgen
from benchmarks.harness.inputs import CtrInputs, RankRequest, SessionEvent
from benchmarks.harness.loadgen import Measurement
from benchmarks.harness.naive_server import NaiveServer
from benchmarks.harness.results import IN_PROCESS, System
from benchmarks.harness.settings import Settings
from benchmarks.harness.triton_side import (
    profile,
    serving,
    sweep_steps,
    variant,
    without_dynamic_batching,
)
from tritonrepo.ctr import spec
from tritonrepo.ctr.features import history_window, model_rows
from tritonrepo.paths import BUILD_DIR
from tritonrepo.server.launcher import TritonServer, free_port
from tritonrepo_client import RankingClient, SessionClient
from tritonrepo_client.connection import TritonConnection

RANKING, SESSION = spec.RANKING_ENSEMBLE, spec.SESSION_MODEL
RANKING_STEPS = (spec.PREPROCESS_MODEL, spec.CORE_MODEL, spec.POSTPROCESS_MODEL)
SCORE_TOLERANCE = 1e-5  # FP32 served vs PyTorch
PRECISION_NAMES = {"fp32": "FP32", "int8": "INT8"}


def _auc(clicks: np.ndarray, scores: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(clicks, scores))


def _rows(request: RankRequest) -> np.ndarray:
    return model_rows(history_window(request.history), request.candidates)


def steps(settings: Settings) -> int:
    """Progress steps of :func:`in_process`, :func:`naive_servers` and :func:`triton`."""
    return 2 + 2 * len(settings.levels) + (2 * len(spec.CORE_VERSIONS) + 3) * len(settings.levels)


def in_process(data: CtrInputs, settings: Settings) -> tuple[list[System], object]:
    """PyTorch, one user per forward and 32 users per forward; sessions event by event.

    Returns:
        The systems and the PyTorch network (the reference).
    """
    import torch

    from builders.onnx_export import ctr_network

    model = ctr_network.load(BUILD_DIR / "ctr" / "model.pt")
    auc = _auc(data.heldout.clicks, ctr_network.predict(model, data.heldout.rows))
    nan = float("nan")
    per_user = [torch.from_numpy(_rows(r)) for r in data.requests]
    latencies = []
    with torch.inference_mode():
        model(per_user[0])  # warm-up
        for rows in per_user:
            started = time.perf_counter()
            model(rows)
            latencies.append(time.perf_counter() - started)
        merged = [torch.cat(per_user[i : i + 32]) for i in range(0, len(per_user), 32)]
        started = time.perf_counter()
        for rows in merged:
            model(rows)
        elapsed = time.perf_counter() - started
    accuracy = f"AUC {auc:.4f}"
    systems = [
        System(
            RANKING,
            "torch_1",
            "PyTorch, in-process, 1 user per forward",
            IN_PROCESS,
            accuracy,
            [Measurement.from_latencies(0, latencies, sum(latencies), 0)],
            f"{inputs.CANDIDATES_PER_REQUEST} candidate rows per forward",
            {"auc": auc},
        ),
        System(
            RANKING,
            "torch_32",
            "PyTorch, in-process, 32 users per forward",
            IN_PROCESS,
            accuracy,
            [Measurement(0, len(per_user) / elapsed, nan, nan, nan, 0, 0)],
            f"{32 * inputs.CANDIDATES_PER_REQUEST} rows per forward",
            {"auc": auc},
        ),
    ]
    settings.progress("PyTorch ranking")
    latencies = []
    with torch.inference_mode():
        for events in data.sessions:
            history: list[int] = []
            for event in events:
                started = time.perf_counter()
                history.append(event.item_id)
                model(
                    torch.from_numpy(
                        model_rows(history_window(np.array(history)), event.candidates)
                    )
                )
                latencies.append(time.perf_counter() - started)
    systems.append(
        System(
            SESSION,
            "torch_1",
            "PyTorch, in-process, history in a dict, 1 event per forward",
            IN_PROCESS,
            accuracy,
            [Measurement.from_latencies(0, latencies, sum(latencies), 0)],
            "",
            {"auc": auc},
        )
    )
    settings.progress("PyTorch sessions")
    return systems, model


def _session_caller(port: int) -> loadgen.CallerFactory:
    """Each call replays one whole session (START ... END) under a fresh id."""
    import http.client
    import json

    ids = itertools.count(1)
    lock = threading.Lock()

    def make():
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)

        def call(events: list[SessionEvent]) -> list[tuple[float, float]]:
            with lock:
                session_id = next(ids)
            timed = []
            for position, event in enumerate(events):
                body = {
                    "item_id": event.item_id,
                    "candidates": event.candidates.tolist(),
                    "start": position == 0,
                    "end": position == len(events) - 1,
                }
                started = time.monotonic()
                connection.request(
                    "POST",
                    f"/session/{session_id}",
                    json.dumps(body),
                    {"Content-Type": "application/json"},
                )
                answer = connection.getresponse()
                payload = answer.read()
                if answer.status != 200:
                    raise RuntimeError(f"HTTP {answer.status}: {payload[:200]!r}")
                timed.append((started, time.monotonic()))
            return timed

        return call, connection.close

    return make


def naive_servers(data: CtrInputs, model, settings: Settings, workers: int) -> list[System]:
    """FastAPI + PyTorch: ranking with ``workers`` workers, sessions with one (in-memory state)."""
    import json
    import urllib.request

    from builders.onnx_export import ctr_network

    systems = []
    body = lambda r: {"history": r.history.tolist(), "candidates": r.candidates.tolist()}  # noqa: E731
    for kind, count in (("rank", workers), ("session", 1)):
        port = free_port()
        with NaiveServer("ctr", port, count, settings.workdir / f"naive_ctr_{kind}.log") as srv:
            if kind == "rank":
                request = data.requests[0]
                answer = urllib.request.urlopen(
                    urllib.request.Request(
                        f"{srv.url}/rank",
                        json.dumps(body(request) | {"top_k": 32}).encode(),
                        {"Content-Type": "application/json"},
                    )
                )
                got = json.loads(answer.read())
                expected = ctr_network.predict(model, _rows(request))
                order = {int(i): s for i, s in zip(got["item_ids"], got["scores"], strict=True)}
                worst = max(
                    abs(order[int(c)] - e)
                    for c, e in zip(request.candidates, expected, strict=True)
                )
                if worst > SCORE_TOLERANCE:
                    raise SystemExit(f"naive ranking server: scores off by {worst:.2e}")
                caller, requests = loadgen.http_json_caller(port, "/rank", body), data.requests
            else:
                caller, requests = _session_caller(port), data.sessions
            levels = []
            for level in settings.levels:
                levels.append(loadgen.run_closed_loop(caller, requests, level, settings.loadgen_s))
                settings.progress(f"naive {kind} c={level}")
        workload = RANKING if kind == "rank" else SESSION
        systems.append(
            System(
                workload,
                "naive",
                f"FastAPI + PyTorch (gunicorn, {count} uvicorn worker{'s' * (count > 1)})",
                "python",
                "",
                levels,
                "one user per request"
                if kind == "rank"
                else "one worker: session state lives in the worker's memory",
            )
        )
    return systems


def served_auc(server: TritonServer, data: CtrInputs, version: int) -> float:
    """Held-out AUC of ``ctr_model`` version ``version``, pinned, on the held-out rows."""
    with TritonConnection(server.options.grpc_url, "grpc") as conn:
        scores = [
            conn.infer(
                spec.CORE_MODEL,
                {spec.CORE_INPUT: data.heldout.rows[i : i + 512]},
                [spec.CORE_OUTPUT],
                model_version=str(version),
            )[spec.CORE_OUTPUT]
            for i in range(0, len(data.heldout.rows), 512)
        ]
    return _auc(data.heldout.clicks, np.concatenate(scores).reshape(-1))


def check_served(server: TritonServer, data: CtrInputs, model, tolerance: float) -> float:
    """Max abs difference of served ranking and session scores to PyTorch.

    Raises:
        SystemExit: above ``tolerance``.
    """
    from builders.onnx_export import ctr_network

    url = server.options.grpc_url
    worst = 0.0
    with RankingClient(url, "grpc") as client:
        for request in data.requests[:8]:
            got = client.rank(request.history, request.candidates, top_k=len(request.candidates))
            expected = dict(
                zip(
                    request.candidates.tolist(),
                    ctr_network.predict(model, _rows(request)),
                    strict=True,
                )
            )
            worst = max(
                worst,
                *(
                    abs(float(s) - expected[int(i)])
                    for i, s in zip(got.item_ids, got.scores, strict=True)
                ),
            )
    with SessionClient(url, "grpc") as client:
        history: list[int] = []
        events = data.sessions[0]
        replay = client.replay(
            f"check-{time.monotonic_ns()}",
            ({"item_id": e.item_id, "candidates": e.candidates} for e in events),
        )
        for event, ranking in replay:
            history.append(int(event["item_id"]))
            rows = model_rows(history_window(np.array(history)), np.asarray(event["candidates"]))
            expected = dict(
                zip(
                    np.asarray(event["candidates"]).tolist(),
                    ctr_network.predict(model, rows),
                    strict=True,
                )
            )
            worst = max(
                worst,
                *(
                    abs(float(s) - expected[int(i)])
                    for i, s in zip(ranking.item_ids, ranking.scores, strict=True)
                ),
            )
    if worst > tolerance:
        raise SystemExit(f"served CTR scores differ from PyTorch by {worst:.2e} > {tolerance}")
    return worst


def triton(server: TritonServer, data: CtrInputs, model, settings: Settings) -> list[System]:
    """ctr_ranking and ctr_session for every ctr_model version, batching on and off, and
    ctr_model called directly."""
    work = settings.workdir
    ranking_data = inputs.write_ranking_data(work / "ranking.json", data.requests)
    session_data = inputs.write_session_data(work / "sessions.json", data.sessions)
    rows_data = inputs.write_rows_data(work / "rows.json", data.requests)
    profile_level = 8 if 8 in settings.levels else max(settings.levels)
    aucs: dict[int, float] = {}
    systems = []

    def served(
        workload, key, name, accuracy, values, model_name, input_data, notes="", batch_size=1
    ) -> None:
        done = sweep_steps(
            server,
            model_name,
            input_data,
            settings.levels,
            settings.window,
            work,
            (spec.CORE_MODEL,),
            on_level=lambda: settings.progress(name),
            batch_size=batch_size,
        )
        levels, stats, failures = done.measurements(), done.stats(), done.failures
        batches = "ctr_model average batch (rows) " + ", ".join(
            f"c{lv}: {s[spec.CORE_MODEL].average_batch:.0f}" for lv, s in stats.items()
        )
        systems.append(
            System(
                workload,
                key,
                name,
                "perf_analyzer",
                accuracy,
                levels,
                "; ".join(filter(None, [notes, batches, *failures])),
                values | profile(stats, profile_level),
            )
        )

    for version, precision in spec.CORE_VERSIONS.items():
        label = f"v{version} {PRECISION_NAMES[precision]}"
        with variant(server, {spec.CORE_MODEL: serving([version])}):
            auc = aucs[version] = served_auc(server, data, version)
            change = f" ({auc - aucs[1]:+.4f} vs FP32)" if version != 1 else ""
            accuracy, values = f"AUC {auc:.4f}{change}", {"auc": auc}
            worst = check_served(server, data, model, SCORE_TOLERANCE if version == 1 else 0.2)
            values = values | {"max_abs_score_diff_vs_pytorch": worst}
            served(
                RANKING,
                f"triton_v{version}",
                f"Triton ctr_ranking, dynamic batching, {label}",
                accuracy,
                values,
                RANKING,
                ranking_data,
            )
            served(
                SESSION,
                f"triton_v{version}",
                f"Triton ctr_session, dynamic batching, {label}",
                accuracy,
                values,
                SESSION,
                session_data,
                notes="perf_analyzer sequences, START/END set by it",
            )
    accuracy = f"AUC {aucs[1]:.4f}"
    with variant(server, {spec.CORE_MODEL: without_dynamic_batching}):
        served(
            RANKING,
            "triton_v1_no_batching",
            "Triton ctr_ranking, dynamic batching off, v1 FP32",
            accuracy,
            {"auc": aucs[1]},
            RANKING,
            ranking_data,
        )
        served(
            SESSION,
            "triton_v1_no_batching",
            "Triton ctr_session, dynamic batching off, v1 FP32",
            accuracy,
            {"auc": aucs[1]},
            SESSION,
            session_data,
        )
    served(
        RANKING,
        "core_direct",
        "Triton ctr_model alone, pre-made rows, v1 FP32",
        accuracy,
        {"auc": aucs[1]},
        spec.CORE_MODEL,
        rows_data,
        notes=f"{inputs.CANDIDATES_PER_REQUEST} rows per request (perf_analyzer -b)",
        batch_size=inputs.CANDIDATES_PER_REQUEST,
    )
    return systems
