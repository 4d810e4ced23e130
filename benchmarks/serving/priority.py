"""Real-time requests under a bulk flood: what a core model's priority levels buy.

``python -m benchmarks.serving.priority`` (run by ``make bench``; ``make bench-priority`` alone)
starts
one server (``text_embedding``, CPU configs), reloads its encoder with the two priority levels a
description's ``priority_levels = 2`` gives it (:func:`priority_levels`; the shipped configs keep
Triton's plain queue), floods it with bulk embedding requests
(``BULK_CLIENTS`` closed-loop clients of ``BULK_TEXTS`` real texts each, priority 2), and sends
real-time single-text requests through the flood, one after another: once at priority 1
(real-time) and once at priority 2 (as if everything were bulk: the FIFO a server without
priority levels has). It reports real-time p50/p95 latency in both rounds and their ratio, in
``build/bench/priority.md`` and ``priority.json``. ``tests/server/test_priority.py`` runs
:func:`flood` on a real server and asserts the ordering only.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tritonrepo.paths import BUILD_DIR
from tritonrepo.server import queue_policy
from tritonrepo.text import spec
from tritonrepo_client import ClientError, EmbeddingClient, RepositoryClient, ServerUnavailable
from tritonrepo_client.retry import NO_RETRY
from tritonrepo_client.scheduling import BULK, REALTIME

BULK_CLIENTS = 24
BULK_TEXTS = 16
REALTIME_REQUESTS = 20
REALTIME_TEXT = "What is the status of my order?"
CALL_DEADLINE_S = 120.0


@contextmanager
def priority_levels(
    repo: RepositoryClient, model: str = spec.ENCODER_MODEL, config_set: str = "cpu"
) -> Iterator[dict[str, Any]]:
    """``model`` reloaded through ``repo`` with the two priority levels, bounded queues and
    queue timeouts that ``priority_levels = 2`` in its description writes for ``config_set``
    (:func:`tritonrepo.server.queue_policy.priority_policy`), and with its own config again
    afterwards. Yields the config it loaded (Triton's JSON field names).

    Raises:
        ClientError: a load failed (the model keeps the config it had).
    """
    original = repo.config(model)
    leveled = copy.deepcopy(original)
    policy = queue_policy.priority_policy(config_set)
    leveled.setdefault("dynamic_batching", {}).update(queue_policy.config_json(policy))
    repo.load(model, config=leveled)
    try:
        yield leveled
    finally:
        repo.load(model, config=original)


class BulkFlood:
    """Closed-loop bulk clients (priority 2) on ``text_embedding`` while the ``with`` block
    runs; every outcome is kept.

    Args:
        url, protocol: the server.
        texts: the texts of every bulk request.
        clients: concurrent bulk clients (threads).

    Attributes:
        served_ms: latency of each served bulk request, ms.
        refused: ``(latency ms, message)`` of each bulk request Triton refused (UNAVAILABLE:
            queue full or queue timeout).
        failed: messages of bulk requests that failed otherwise.
    """

    def __init__(self, url: str, protocol: str, texts: list[str], clients: int) -> None:
        self.texts = texts
        self.served_ms: list[float] = []
        self.refused: list[tuple[float, str]] = []
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._client = EmbeddingClient(
            url, protocol, timeout_s=CALL_DEADLINE_S, retry=NO_RETRY, priority=BULK
        )
        self._threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(clients)]

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.perf_counter()
            try:
                self._client.embed(self.texts)
                outcome: tuple[str, object] = ("served", None)
            except ServerUnavailable as exc:
                outcome = ("refused", str(exc))
            except ClientError as exc:
                outcome = ("failed", str(exc))
            ms = (time.perf_counter() - started) * 1e3
            with self._lock:
                if outcome[0] == "served":
                    self.served_ms.append(ms)
                elif outcome[0] == "refused":
                    self.refused.append((ms, str(outcome[1])))
                elif not self._stop.is_set():
                    self.failed.append(str(outcome[1]))

    def __enter__(self) -> BulkFlood:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(CALL_DEADLINE_S)
        self._client.close()


@dataclass
class FloodResult:
    """One flood round.

    Attributes:
        realtime_ms: latency of each real-time request, ms (in send order).
        bulk_ms: latency of each served bulk request, ms.
        bulk_rejected: bulk requests Triton refused (queue full or queue timeout).
        realtime_errors: messages of real-time requests that failed.
        realtime_embeddings: FP32 ``[n, 384]`` answers to the real-time requests.
    """

    realtime_ms: list[float] = field(default_factory=list)
    bulk_ms: list[float] = field(default_factory=list)
    bulk_rejected: int = 0
    realtime_errors: list[str] = field(default_factory=list)
    realtime_embeddings: list[np.ndarray] = field(default_factory=list)


def flood(
    url: str,
    protocol: str,
    bulk_texts: list[str],
    realtime_priority: int = REALTIME,
    bulk_clients: int = BULK_CLIENTS,
    realtime_requests: int = REALTIME_REQUESTS,
    warmup_s: float = 2.0,
) -> FloodResult:
    """Flood ``text_embedding`` at ``url`` with bulk requests (:class:`BulkFlood`) and send
    ``realtime_requests`` single-text requests at ``realtime_priority`` through it, one at a
    time, after ``warmup_s`` seconds (longer while no bulk request has been answered yet).

    Returns:
        The round's :class:`FloodResult`; bulk failures other than refusals end up in
        ``realtime_errors`` too, prefixed ``bulk:``.
    """
    result = FloodResult()
    with (
        BulkFlood(url, protocol, bulk_texts, bulk_clients) as bulk,
        EmbeddingClient(url, protocol, timeout_s=CALL_DEADLINE_S, retry=NO_RETRY) as realtime,
    ):
        warm_until = time.monotonic() + warmup_s * 5
        time.sleep(warmup_s)
        while not (bulk.served_ms or bulk.refused) and time.monotonic() < warm_until:
            time.sleep(0.2)  # a cold server: the first batches take longer
        for _ in range(realtime_requests):
            started = time.perf_counter()
            try:
                vector = realtime.embed([REALTIME_TEXT], priority=realtime_priority)
            except ClientError as exc:
                result.realtime_errors.append(str(exc))
                continue
            result.realtime_ms.append((time.perf_counter() - started) * 1e3)
            result.realtime_embeddings.append(vector[0])
            time.sleep(0.05)
    result.bulk_ms = bulk.served_ms
    result.bulk_rejected = len(bulk.refused)
    result.realtime_errors += [f"bulk: {m}" for m in bulk.failed]
    return result


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def main(argv: list[str] | None = None) -> int:
    """Run both rounds on a fresh server and write the report; exit 0."""
    from reference_data.text_corpus import real_texts
    from tritonrepo.server.launcher import ServerOptions, TritonServer, free_port

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--protocol", choices=("http", "grpc"), default="grpc")
    parser.add_argument("--output", type=Path, default=BUILD_DIR / "bench")
    args = parser.parse_args(argv)
    texts = real_texts(BULK_TEXTS)
    options = ServerOptions(
        models=("text_embedding",),
        http_port=free_port(),
        grpc_port=free_port(),
        metrics_port=free_port(),
        log_file=BUILD_DIR / "bench" / "priority-server.log",
    )
    rounds: dict[str, FloodResult] = {}
    with (
        TritonServer(options),
        RepositoryClient(options.http_url, "http") as repo,
        priority_levels(repo),
    ):
        url = options.url(args.protocol)
        flood(url, args.protocol, texts, realtime_requests=3)  # warm-up, not reported
        for name, priority in (("realtime priority (1)", REALTIME), ("no priority (2)", BULK)):
            rounds[name] = flood(url, args.protocol, texts, realtime_priority=priority)
    with_p, without = rounds["realtime priority (1)"], rounds["no priority (2)"]
    ratio = _pct(without.realtime_ms, 50) / _pct(with_p.realtime_ms, 50)
    lines = [
        "# Real-time requests under a bulk flood",
        "",
        f"{BULK_CLIENTS} bulk clients x {BULK_TEXTS} real texts (priority 2), "
        f"{REALTIME_REQUESTS} single-text real-time requests one after another, {args.protocol}, "
        "text_embedding on the CPU configs.",
        "",
        "| real-time requests sent at | p50 ms | p95 ms | bulk p50 ms | bulk served | bulk "
        "rejected | real-time errors |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in rounds.items():
        lines.append(
            f"| {name} | {_pct(r.realtime_ms, 50):.0f} | {_pct(r.realtime_ms, 95):.0f} | "
            f"{_pct(r.bulk_ms, 50):.0f} | {len(r.bulk_ms)} | {r.bulk_rejected} | "
            f"{len(r.realtime_errors)} |"
        )
    lines += ["", f"Real-time p50 without priority / with priority: **{ratio:.1f}x**."]
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "priority.md").write_text("\n".join(lines) + "\n")
    summary = {
        name: {k: v for k, v in asdict(r).items() if k != "realtime_embeddings"}
        for name, r in rounds.items()
    }
    summary["ratio_p50"] = ratio  # type: ignore[assignment]
    (args.output / "priority.json").write_text(json.dumps(summary, indent=1))
    print("\n".join(lines))
    print(f"median real-time latency: {statistics.median(with_p.realtime_ms):.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
