"""``benchmarks.harness.wrk.parse`` on reports ``wrk`` 4.1.0 (Debian's) printed: wrk pads a
duration of
a second or more with a trailing space ("1.94s "), which the parser must read as well."""

from __future__ import annotations

import math

from benchmarks.harness import wrk

# ctr_ranking's CPU ensemble at c=16 on 2 cores, 2026-12-02: wrk's report as printed.
SECONDS_REPORT = "\n".join(
    [
        "Running 3s test @ http://127.0.0.1:42431",
        "  16 threads and 16 connections",
        "  Thread Stats   Avg      Stdev     Max   +/- Stdev",
        "    Latency   722.45ms  580.39ms   1.94s    81.82%",
        "    Req/Sec     2.14      1.21     3.00     77.78%",
        "  Latency Distribution",
        "     50%  328.76ms",
        "     75%    1.09s ",
        "     90%    1.78s ",
        "     99%    1.94s ",
        "  72 requests in 3.10s, 44.01KB read",
        "Requests/sec:     23.23",
        "Transfer/sec:     14.20KB",
        "",
    ]
)

# click_lightgbm's one-step model through the guard at c=16, with a refused request added.
MICROSECONDS_REPORT = """Running 6s test @ http://127.0.0.1:18105
  16 threads and 16 connections
  Latency Distribution
     50%  754.00us
     75%    2.38ms
     90%    2.95ms
     99%    7.10ms
  45568 requests in 6.00s, 11.20MB read
  Non-2xx or 3xx responses: 3
Requests/sec:   7594.78
"""


def test_durations_of_a_second_or_more_are_read():
    m = wrk.parse(SECONDS_REPORT, 16)
    assert (m.concurrency, m.throughput, m.requests, m.errors) == (16, 23.23, 72, 0)
    assert m.p50_ms == 328.76 and math.isclose(m.p99_ms, 1940.0)
    assert math.isnan(m.p95_ms)


def test_microseconds_and_refusals_are_read():
    m = wrk.parse(MICROSECONDS_REPORT, 16)
    assert math.isclose(m.p50_ms, 0.754) and m.p99_ms == 7.10
    assert (m.throughput, m.requests, m.errors) == (7594.78, 45568, 3)
