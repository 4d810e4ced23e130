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
# The most seconds a window goes on past its length while it waits for its least answers.
MAX_EXTENSION_S = 60.0


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
    min_answers: int = 1,
    longest_s: float = MAX_EXTENSION_S,
) -> Measurement:
    """Drive ``concurrency`` workers for ``warmup_s`` seconds, then measure at least
    ``duration_s`` seconds.

    The window goes on past ``duration_s`` until ``min_answers`` requests (default 1: a window
    is never empty) were sent and answered inside it, for at most ``longest_s`` more seconds: a
    slow system on a busy host (a CPU ResNet-50 at c=8 answers in over a second) still gets a
    measurement, as perf_analyzer's ``count_windows`` mode gives it.

    Returns:
        The :class:`Measurement` of the window after the warm-up: inferences that were sent and
        answered inside it, per second of the window, and their latencies.

    Raises:
        RuntimeError: every request failed (the first error is chained), or a worker could not
            connect.
    """
    start = time.monotonic()
    opens = start + warmup_s
    earliest_end, latest_end = opens + duration_s, opens + duration_s + longest_s
    answered: list[tuple[float, float]] = []  # (sent, done) of requests sent in the window
    errors: list[BaseException] = []
    lock = threading.Lock()
    closed = threading.Event()

    def window_over(now: float) -> bool:
        # a window of refusals only is not waited on: run_closed_loop raises for it
        full = len(answered) >= min_answers or (errors and not answered)
        if now >= latest_end or (now >= earliest_end and full):
            closed.set()
        return closed.is_set()

    def worker(offset: int) -> None:
        try:
            call, close = make_caller()
        except BaseException as exc:  # report, don't hang the other workers
            with lock:
                errors.append(exc)
            return
        try:
            i = offset
            while not window_over(time.monotonic()):
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
                with lock:
                    answered.extend((a, b) for a, b in timed if a >= opens)
                i += concurrency
        finally:
            close()

    threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=warmup_s + duration_s + longest_s + 120)
    ends = sorted(b for _, b in answered)
    if len(ends) < min_answers:
        end = latest_end
    else:
        end = max(earliest_end, ends[min_answers - 1]) if min_answers > 0 else earliest_end
    latencies = [b - a for a, b in answered if b <= end]
    if errors and not latencies:
        raise RuntimeError(f"all requests failed: {errors[0]!r}") from errors[0]
    return Measurement.from_latencies(concurrency, latencies, end - opens, len(errors))


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
