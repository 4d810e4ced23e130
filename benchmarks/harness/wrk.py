"""A closed-loop HTTP load generator written in C (``wrk``, Debian's package, 4.1), for
comparing HTTP servers on the machine that runs them.

The Python load generator (:mod:`benchmarks.harness.loadgen`) costs about a third of a core at 3,000
requests/s on 2 cores, so on a 2-core machine it takes a share of the CPU the servers compete
for. ``wrk`` costs a few per cent, so the figures are the servers'. ``concurrency`` keep-alive
connections, one per ``wrk`` thread, each send their next request when the last answer arrived
(perf_analyzer's concurrency mode); a Lua script cycles through the prepared request bodies,
each with its own headers. One thread per connection spreads the connections' opening in time:
gunicorn's uvicorn workers share one listening socket, and a burst of 16 connections from one
``wrk`` thread was often accepted by one worker (2 workers then served 1,650 requests/s, against
3,500-3,850 when the connections were spread).

``wrk`` reports latency percentiles from its own histogram (``--latency``: 50, 75, 90, 99 %),
throughput over the whole run and the answers that were not 2xx; a warm-up run is made and
discarded first.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from benchmarks.harness.loadgen import Measurement

WRK = "wrk"
INSTALL = "apt-get install -y wrk (make perf-deps)"
_UNITS_MS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}

LUA = """
local dir, count = "{dir}", {count}
bodies, heads = {{}}, {{}}
for k = 1, count do
  local f = io.open(dir .. "/" .. k .. ".body", "rb"); bodies[k] = f:read("*a"); f:close()
  heads[k] = {{}}
  for line in io.lines(dir .. "/" .. k .. ".head") do
    local name, value = line:match("^([^:]+): (.*)$")
    heads[k][name] = value
  end
end
local i = 0
request = function()
  i = i % count + 1
  return wrk.format("POST", "{path}", heads[i], bodies[i])
end
"""


def available() -> bool:
    """True when ``wrk`` is on ``PATH`` and starts (its version banner; a copy carried to
    another host may lack a library it links)."""
    if shutil.which(WRK) is None:
        return False
    try:
        done = subprocess.run([WRK, "--version"], capture_output=True, text=True, timeout=10)
    except OSError:
        return False
    return done.stdout.startswith("wrk ")


def json_bodies(bodies: Iterable[object]) -> list[tuple[bytes, dict[str, str]]]:
    """Each body as JSON text with its ``Content-Type``, as :func:`run` takes them."""
    return [(json.dumps(body).encode(), {"Content-Type": "application/json"}) for body in bodies]


def _ms(text: str) -> float:
    """``wrk``'s duration text (``754.00us``, ``2.65ms``, ``1.02s``) in milliseconds."""
    match = re.fullmatch(r"([0-9.]+)(us|ms|s|m)", text.strip())
    if not match:
        raise ValueError(f"unexpected wrk duration {text!r}")
    return float(match.group(1)) * _UNITS_MS[match.group(2)]


def parse(output: str, concurrency: int) -> Measurement:
    """A :class:`Measurement` from ``wrk --latency``'s report: requests/s, p50 and p99 of its
    latency distribution (``wrk`` reports no p95: NaN), the slowest request, requests completed
    and errors (non-2xx answers plus socket errors).

    Raises:
        ValueError: the report lacks its requests/s or latency distribution lines.
    """
    rate = re.search(r"Requests/sec:\s+([0-9.]+)", output)
    latency = re.search(r"^\s+Latency\s+\S+\s+\S+\s+(\S+)", output, flags=re.M)
    percentiles = dict(re.findall(r"^\s+(50|99)%\s+(\S+)\s*$", output, flags=re.M))
    done = re.search(r"^\s+(\d+) requests in", output, flags=re.M)
    if not rate or not done or set(percentiles) != {"50", "99"}:
        raise ValueError(f"wrk's report has no throughput or latency distribution:\n{output}")
    errors = sum(int(n) for n in re.findall(r"Non-2xx or 3xx responses: (\d+)", output))
    sockets = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)",
                        output)  # fmt: skip
    if sockets:
        errors += sum(int(n) for n in sockets.groups())
    return Measurement(
        concurrency,
        float(rate.group(1)),
        _ms(percentiles["50"]),
        float("nan"),
        _ms(percentiles["99"]),
        int(done.group(1)),
        errors,
        _ms(latency.group(1)) if latency else float("nan"),
    )


def run(
    port: int,
    path: str,
    bodies: Sequence[tuple[bytes, Mapping[str, str]]],
    concurrency: int,
    seconds: float,
    warmup_s: float = 1.0,
    trials: int = 1,
) -> Measurement:
    """POST ``bodies`` (each with its headers) in turn to ``http://127.0.0.1:<port><path>``
    from ``concurrency`` connections for ``seconds`` (after a discarded ``warmup_s`` run);
    with ``trials`` > 1, that many runs on new connections, and the one with the highest
    throughput (the connections of a run may still land unevenly on gunicorn's workers; every
    system gets the same trials).

    Raises:
        RuntimeError: ``wrk`` is not installed (the message says how to install it), or it
            failed or answered no request.
    """
    if not available():
        raise RuntimeError(f"wrk is not installed: {INSTALL}")
    with tempfile.TemporaryDirectory(prefix="wrk-") as tmp:
        folder = Path(tmp)
        for k, (body, headers) in enumerate(bodies, start=1):
            (folder / f"{k}.body").write_bytes(body)
            (folder / f"{k}.head").write_text("".join(f"{n}: {v}\n" for n, v in headers.items()))
        script = folder / "bodies.lua"
        script.write_text(LUA.format(dir=folder, count=len(bodies), path=path))
        url = f"http://127.0.0.1:{port}"

        def once(duration_s: float) -> str:
            seconds_arg = f"-d{max(1, round(duration_s))}s"
            command = [WRK, f"-t{concurrency}", f"-c{concurrency}", seconds_arg,
                       "--latency", "-s", str(script), url]  # fmt: skip
            done = subprocess.run(command, capture_output=True, text=True, timeout=duration_s + 60)
            if done.returncode != 0:
                raise RuntimeError(f"wrk failed ({done.returncode}): {done.stderr.strip()}")
            return done.stdout

        once(warmup_s)
        outputs = [once(seconds) for _ in range(max(1, trials))]
    runs = [parse(output, concurrency) for output in outputs]
    best = max(runs, key=lambda m: m.throughput)
    if not best.requests:
        raise RuntimeError(f"wrk answered no request: {json.dumps(outputs[-1])}")
    return best
