"""Run Triton's ``perf_analyzer`` (from the pinned tritonclient 2.51.0 wheel) and read its CSV.

perf_analyzer 2.51 links ``libb64.so.0d`` (Debian's ``libb64-0d``; ``make bench`` installs it)
and ``libcudart.so.12`` (the ``nvidia-cuda-runtime-cu12`` wheel, put on ``LD_LIBRARY_PATH``
here). It does not look at outputs: the harness checks them before timing.
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from benchmarks.loadgen import Measurement


@dataclass(frozen=True)
class Window:
    """How long perf_analyzer measures one concurrency level.

    perf_analyzer repeats ``interval_ms`` windows until the last three agree on average
    latency within ``stability_percent`` (at most ``max_trials`` windows).
    """

    interval_ms: int = 3000
    stability_percent: int = 25
    max_trials: int = 6

    def describe(self) -> str:
        """For the report, e.g. "3000 ms windows, stable within 25 %, at most 6 windows"."""
        return (
            f"{self.interval_ms} ms windows until 3 agree within {self.stability_percent} % "
            f"(at most {self.max_trials})"
        )


def binary() -> str:
    """Path of ``perf_analyzer`` (installed next to this interpreter by tritonclient[all]).

    Raises:
        FileNotFoundError: tritonclient[all] is not installed.
    """
    found = shutil.which("perf_analyzer") or str(Path(sys.executable).parent / "perf_analyzer")
    if not Path(found).is_file():
        raise FileNotFoundError("perf_analyzer not found; run `make setup` (tritonclient[all])")
    return found


def environment() -> dict[str, str]:
    """This process's environment plus ``libcudart.so.12`` from nvidia-cuda-runtime-cu12 (when
    that package is importable; otherwise ``LD_LIBRARY_PATH`` must already find it)."""
    env = dict(os.environ)
    try:
        import nvidia.cuda_runtime
    except ImportError:
        return env
    lib = Path(next(iter(nvidia.cuda_runtime.__path__))) / "lib"
    env["LD_LIBRARY_PATH"] = os.pathsep.join([str(lib), env.get("LD_LIBRARY_PATH", "")])
    return env


def measure(
    model: str,
    url: str,
    input_data: Path,
    concurrency: int,
    report: Path,
    window: Window,
    model_version: str = "",
    batch_size: int = 1,
    extra_args: tuple[str, ...] = (),
) -> Measurement:
    """One perf_analyzer run over gRPC at one concurrency level.

    Args:
        model: model to load-test (an ensemble, a step, or a sequence model; perf_analyzer
            sets the sequence flags itself for the latter).
        url: gRPC ``host:port``.
        input_data: ``--input-data`` JSON (see :mod:`benchmarks.inputs`).
        concurrency: requests (or sequences) in flight.
        report: CSV file to write.
        window: measurement window settings.
        model_version: pin a version ('' = the server's choice).
        batch_size: batch items per request (``-b``; the input data then holds one item per
            entry).
        extra_args: more perf_analyzer flags.

    Returns:
        Throughput in requests/s (perf_analyzer's inferences/s divided by ``batch_size``) and
        p50/p95/p99 latency (ms) of the stable windows.

    Raises:
        RuntimeError: perf_analyzer failed, or found no stable measurement with windows of
            ``window.interval_ms`` and twice that (its last output lines are in the message).
    """
    base = [
        binary(), "-m", model, "-u", url, "-i", "grpc",
        "--input-data", str(input_data),
        "--concurrency-range", str(concurrency),
        "--stability-percentage", str(window.stability_percent),
        "-f", str(report), "-b", str(batch_size), *extra_args,
    ]  # fmt: skip
    if model_version:
        base += ["-x", model_version]
    # A level that never settles within the window (seen with sequences on a busy 2-core
    # machine) gets one more try with windows twice as long, then fails.
    for attempt, interval in enumerate((window.interval_ms, 2 * window.interval_ms)):
        report.unlink(missing_ok=True)
        cmd = [*base, "--measurement-interval", str(interval), "--max-trials",
               str(window.max_trials)]  # fmt: skip
        out = subprocess.run(cmd, capture_output=True, text=True, env=environment(), timeout=900)
        if out.returncode == 0 and report.is_file():
            break
        unstable = "Failed to obtain stable measurement" in out.stdout + out.stderr
        if attempt == 1 or not unstable:
            tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-6:])
            raise RuntimeError(
                f"perf_analyzer on {model} at concurrency {concurrency} failed: {tail}"
            )
    row = next(csv.DictReader(report.open()))
    ms = {p: float(row[f"p{p} latency"]) / 1e3 for p in (50, 95, 99)}  # CSV is in µs
    return Measurement(
        concurrency=concurrency,
        throughput=float(row["Inferences/Second"]) / batch_size,
        p50_ms=ms[50],
        p95_ms=ms[95],
        p99_ms=ms[99],
        requests=-1,  # perf_analyzer reports rates, not counts
        errors=0,
    )
