"""A closed-loop Python load generator, for systems perf_analyzer cannot drive.

``concurrency`` worker threads each send one request, wait for its answer and send the next, as
perf_analyzer's concurrency mode does. Each worker owns its connection (``make_caller`` is
called once per worker) and walks the shared request list from its own offset, so all workers
together cycle through the same inputs that perf_analyzer gets. A warm-up period is discarded,
then every latency inside the measurement window is kept.

It drives the naive FastAPI servers and, as a cross-check of the two load sources, Triton.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# make_caller() -> (call(request), close()); runs in the worker's thread. call() returns None
# (one inference, timed here) or the (sent, answered) time.monotonic() pairs of the several
# inferences it made (e.g. every event of one session), each counted on its own.
Call = Callable[[Any], "Sequence[tuple[float, float]] | None"]
CallerFactory = Callable[[], tuple[Call, Callable[[], None]]]


@dataclass(frozen=True)
class Measurement:
    """One load level.

    ``throughput`` is completed requests per second in the window; latencies are in ms
    (``max_ms``: the slowest request, NaN where unknown); ``errors`` counts requests that raised
    (they are not in the latencies).
    """

    concurrency: int
    throughput: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    requests: int
    errors: int
    max_ms: float = float("nan")

    @classmethod
    def from_latencies(
        cls, concurrency: int, latencies_s: Sequence[float], window_s: float, errors: int
    ) -> Measurement:
        """Summarise latencies (seconds) of requests that completed within ``window_s``."""
        ms = np.asarray(latencies_s, dtype=np.float64) * 1e3
        pct = np.percentile(ms, [50, 95, 99]) if len(ms) else [float("nan")] * 3
        worst = float(ms.max()) if len(ms) else float("nan")
        return cls(concurrency, len(ms) / window_s, *map(float, pct), len(ms), errors, worst)


def run_closed_loop(
    make_caller: CallerFactory,
    requests: Sequence[Any],
    concurrency: int,
    duration_s: float,
    warmup_s: float = 1.0,
) -> Measurement:
    """Drive ``concurrency`` workers for ``warmup_s + duration_s`` seconds.

    Returns:
        The :class:`Measurement` of the window after the warm-up: inferences that were sent and
        answered inside it, per second, and their latencies.

    Raises:
        RuntimeError: every request failed (the first error is chained), or a worker could not
            connect.
    """
    start = time.monotonic()
    window = (start + warmup_s, start + warmup_s + duration_s)
    latencies: list[float] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker(offset: int) -> None:
        try:
            call, close = make_caller()
        except BaseException as exc:  # report, don't hang the other workers
            with lock:
                errors.append(exc)
            return
        try:
            i = offset
            while time.monotonic() < window[1]:
                sent = time.monotonic()
                try:
                    parts = call(requests[i % len(requests)])
                except Exception as exc:
                    with lock:
                        errors.append(exc)
                    time.sleep(0.01)
                    continue
                done = time.monotonic()
                timed = [(sent, done)] if parts is None else parts
                kept = [b - a for a, b in timed if window[0] <= a and b <= window[1]]
                with lock:
                    latencies.extend(kept)
                i += concurrency
        finally:
            close()

    threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=warmup_s + duration_s + 120)
    if errors and not latencies:
        raise RuntimeError(f"all requests failed: {errors[0]!r}") from errors[0]
    return Measurement.from_latencies(concurrency, latencies, duration_s, len(errors))


def http_caller(
    port: int, path: str, body: Callable[[Any], bytes | str], content_type: str
) -> CallerFactory:
    """Workers that POST ``body(request)`` (sent as ``content_type``) to
    ``http://127.0.0.1:<port><path>`` over their own keep-alive connection; a non-200 answer
    raises."""

    def make():
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)

        def call(request) -> None:
            connection.request("POST", path, body(request), {"Content-Type": content_type})
            answer = connection.getresponse()
            data = answer.read()
            if answer.status != 200:
                raise RuntimeError(f"HTTP {answer.status}: {data[:200]!r}")

        return call, connection.close

    return make


def http_json_caller(port: int, path: str, body: Callable[[Any], dict]) -> CallerFactory:
    """:func:`http_caller` with ``body(request)`` sent as JSON."""
    return http_caller(port, path, lambda request: json.dumps(body(request)), "application/json")
