"""Run Triton's ``perf_analyzer`` (from the pinned tritonclient 2.51.0 wheel) and read its CSV.

perf_analyzer 2.51 links ``libb64.so.0d`` (Debian's ``libb64-0d``; ``make bench`` installs it)
and ``libcudart.so.12`` (the ``nvidia-cuda-runtime-cu12`` wheel, put on ``LD_LIBRARY_PATH``
here). It does not look at outputs: the harness checks them before timing.

How the load generator is kept off the server's cores:

* **Asynchronous mode with few threads.** In its default synchronous mode perf_analyzer starts
  one thread per request in flight (``perf_analyzer --help``, ``--async``), so concurrency 256
  is 256 threads that the kernel schedules next to the server's. With ``--async`` and
  ``--max-threads N`` it keeps the same number of requests in flight from ``N`` sending threads
  (``client_threads``; :data:`CLIENT_THREADS` by default, ``None`` for synchronous mode).
* **Pinning, on large hosts.** On a host with more than :data:`PIN_ABOVE_CORES` usable cores the
  process is pinned (``taskset -c``, or ``sched_setaffinity`` where taskset is missing) to the
  highest-numbered :func:`client_cpus` cores. The server is not pinned, so this bounds how
  many cores the client can take rather than reserving them; the pinned set is recorded
  (:class:`ClientUsage`). On a small host pinning would leave the client one core to fight the
  server on, so it is not done.
* **Measured, not assumed.** :func:`run_level` returns the CPU seconds the perf_analyzer process
  used (``os.wait4``'s rusage of exactly that child) over its wall time: ``cores`` near the
  pinned count means the client, not the server, was the limit.
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness.loadgen import Measurement

# Sending threads in --async mode. One thread issues a gRPC request in tens of µs, so 4
# sustain tens of thousands of requests/s, above what one Triton ensemble of Python steps
# answers; perf_analyzer's own --async default is 16.
CLIENT_THREADS = 4
PIN_ABOVE_CORES = 8  # pin perf_analyzer only on hosts with more usable cores than this
AUTO = "auto"  # client_cpus: pin on large hosts (see client_cpus())
# The CSV's breakdown of the mean latency (µs); perf_analyzer 2.51 writes no "Avg latency"
# column, and "Network+Server Send/Recv" is the mean minus the other parts, so they sum to it.
LATENCY_PARTS = (
    "Client Send",
    "Network+Server Send/Recv",
    "Server Queue",
    "Server Compute Input",
    "Server Compute Infer",
    "Server Compute Output",
    "Client Recv",
)


@dataclass(frozen=True)
class Window:
    """How long perf_analyzer measures one concurrency level.

    perf_analyzer repeats ``interval_ms`` windows until the last three agree on average
    latency within ``stability_percent`` (at most ``max_trials`` windows). With
    ``request_count``, a window lasts until that many requests were answered instead
    (perf_analyzer's ``count_windows`` mode): a slow system still gets answers in every window,
    where a short time window on a busy host can end with none.
    """

    interval_ms: int = 3000
    stability_percent: int = 25
    max_trials: int = 6
    request_count: int = 0

    def describe(self) -> str:
        """For the report, e.g. "3000 ms windows, stable within 25 %, at most 6 windows"."""
        length = (
            f"windows of {self.request_count} answers"
            if self.request_count
            else f"{self.interval_ms} ms windows"
        )
        return (
            f"{length} until 3 agree within {self.stability_percent} % (at most {self.max_trials})"
        )

    def options(self, attempt: int) -> list[str]:
        """perf_analyzer's window options for try ``attempt`` (0, then 1: windows twice as
        long, for a level that did not settle)."""
        if self.request_count:
            count = str(self.request_count * (attempt + 1))
            return ["--measurement-mode", "count_windows", "--measurement-request-count", count]
        return ["--measurement-interval", str(self.interval_ms * (attempt + 1))]


@dataclass(frozen=True)
class ClientUsage:
    """What the perf_analyzer process itself used during one level.

    Attributes:
        cpu_s: user + system CPU seconds of the process (all its threads), every attempt.
        wall_s: wall seconds the process ran, every attempt.
        peak_threads: most threads seen in ``/proc/<pid>/status`` (sampled every 0.5 s; 0
            where ``/proc`` is missing).
        client_threads: ``--max-threads`` in ``--async`` mode; None = synchronous mode.
        cpus: the cores it was pinned to; () = not pinned.
        host_cores: usable cores of the machine (``os.sched_getaffinity``).
    """

    cpu_s: float
    wall_s: float
    peak_threads: int
    client_threads: int | None
    cpus: tuple[int, ...]
    host_cores: int

    @property
    def cores(self) -> float:
        """Cores busy on average: CPU seconds / wall seconds."""
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0

    def describe(self) -> str:
        """E.g. "perf_analyzer 0.42 cores of 16 (pinned to 14-15; --async, 4 threads; peak
        9 threads)"."""
        mode = f"--async, {self.client_threads} threads" if self.client_threads else "sync"
        pinned = f"pinned to {cpu_list(self.cpus)}" if self.cpus else "not pinned"
        return (
            f"perf_analyzer {self.cores:.2f} cores of {self.host_cores} ({pinned}; {mode}; "
            f"peak {self.peak_threads} threads)"
        )


@dataclass(frozen=True)
class Level:
    """One measured level: the measurement, perf_analyzer's mean latency, and client usage.

    ``avg_latency_ms`` is the mean latency of the stable windows (:func:`mean_latency_ms`).
    """

    measurement: Measurement
    avg_latency_ms: float
    client: ClientUsage


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


def mean_latency_ms(row: dict[str, str]) -> float:
    """Mean request latency in ms from one perf_analyzer CSV row: ``Avg latency`` where the
    CSV has it, else the sum of :data:`LATENCY_PARTS` (all µs); NaN when neither is there."""
    if row.get("Avg latency"):
        return float(row["Avg latency"]) / 1e3
    if all(row.get(part) for part in LATENCY_PARTS):
        return sum(float(row[part]) for part in LATENCY_PARTS) / 1e3
    return float("nan")


def host_cores() -> int:
    """Cores this process may run on (``os.sched_getaffinity``)."""
    return len(os.sched_getaffinity(0))


def client_cpus(available: tuple[int, ...] | None = None) -> tuple[int, ...]:
    """The cores to pin perf_analyzer to: the highest-numbered ``max(2, n // 8)`` of the ``n``
    usable cores when ``n > PIN_ABOVE_CORES`` (16 cores: 2; 128: 16), else () (not pinned).

    ``available`` defaults to ``os.sched_getaffinity(0)``.
    """
    cores = tuple(sorted(os.sched_getaffinity(0) if available is None else available))
    if len(cores) <= PIN_ABOVE_CORES:
        return ()
    return cores[-max(2, len(cores) // 8) :]


def cpu_list(cpus: tuple[int, ...]) -> str:
    """``taskset -c`` form: (14, 15) -> "14-15", (1, 3) -> "1,3"."""
    parts, start = [], None
    for i, cpu in enumerate(cpus):
        start = cpu if start is None else start
        if i + 1 == len(cpus) or cpus[i + 1] != cpu + 1:
            parts.append(str(cpu) if cpu == start else f"{start}-{cpu}")
            start = None
    return ",".join(parts)


def _threads(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            return next(int(line.split()[1]) for line in fh if line.startswith("Threads:"))
    except (OSError, StopIteration, ValueError):
        return 0


def _run(
    cmd: list[str], cpus: tuple[int, ...], timeout_s: float
) -> tuple[int, str, float, float, int]:
    """Run ``cmd``; returns (exit status, stdout+stderr, CPU s, wall s, peak threads).

    Raises:
        subprocess.TimeoutExpired: it ran longer than ``timeout_s`` (it is killed first).
    """
    preexec = None
    if cpus:
        if shutil.which("taskset"):
            cmd = ["taskset", "-c", cpu_list(cpus), *cmd]
        else:
            preexec = lambda: os.sched_setaffinity(0, cpus)  # noqa: E731
    with tempfile.TemporaryFile("w+") as log:
        started = time.monotonic()
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=environment(), preexec_fn=preexec
        )
        done, peak = threading.Event(), [0]

        def watch() -> None:
            while not done.wait(0.5):
                peak[0] = max(peak[0], _threads(proc.pid))
                if time.monotonic() - started > timeout_s:
                    proc.kill()

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        _, status, usage = os.wait4(proc.pid, 0)  # rusage of exactly this child
        wall = time.monotonic() - started
        done.set()
        watcher.join()
        proc.returncode = os.waitstatus_to_exitcode(status)
        log.seek(0)
        output = log.read()
    if wall > timeout_s:
        raise subprocess.TimeoutExpired(cmd, timeout_s, output)
    return proc.returncode, output, usage.ru_utime + usage.ru_stime, wall, peak[0]


def run_level(
    model: str,
    url: str,
    input_data: Path,
    concurrency: int,
    report: Path,
    window: Window,
    model_version: str = "",
    batch_size: int = 1,
    extra_args: tuple[str, ...] = (),
    client_threads: int | None = CLIENT_THREADS,
    pin: tuple[int, ...] | str = AUTO,
) -> Level:
    """One perf_analyzer run over gRPC at one concurrency level, with its own CPU use.

    Args:
        model: model to load-test (an ensemble, a step, or a sequence model; perf_analyzer
            sets the sequence flags itself for the latter).
        url: gRPC ``host:port``.
        input_data: ``--input-data`` JSON (see :mod:`benchmarks.harness.inputs`).
        concurrency: requests (or sequences) in flight.
        report: CSV file to write.
        window: measurement window settings.
        model_version: pin a version ('' = the server's choice).
        batch_size: batch items per request (``-b``; the input data then holds one item per
            entry).
        extra_args: more perf_analyzer flags.
        client_threads: ``--async --max-threads client_threads``; None = synchronous mode
            (one thread per request in flight).
        pin: cores to pin perf_analyzer to, ``()`` for none, or :data:`AUTO`
            (:func:`client_cpus`).

    Returns:
        Throughput in requests/s (perf_analyzer's inferences/s divided by ``batch_size``),
        p50/p95/p99 and mean latency (ms) of the stable windows, and the client's CPU use.

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
    if client_threads is not None:
        base += ["--async", "--max-threads", str(client_threads)]
    if model_version:
        base += ["-x", model_version]
    cpus = client_cpus() if pin == AUTO else tuple(pin)
    cpu_s = wall_s = 0.0
    peak = 0
    # A level that never settles within the window (seen with sequences on a busy 2-core
    # machine) gets one more try with windows twice as long, then fails.
    for attempt in (0, 1):
        report.unlink(missing_ok=True)
        cmd = [*base, *window.options(attempt), "--max-trials", str(window.max_trials)]
        code, output, cpu, wall, threads = _run(cmd, cpus, timeout_s=900)
        cpu_s, wall_s, peak = cpu_s + cpu, wall_s + wall, max(peak, threads)
        if code == 0 and report.is_file():
            break
        unstable = "Failed to obtain stable measurement" in output
        if attempt == 1 or not unstable:
            tail = "\n".join(output.strip().splitlines()[-6:])
            raise RuntimeError(
                f"perf_analyzer on {model} at concurrency {concurrency} failed: {tail}"
            )
    row = next(csv.DictReader(report.open()))
    ms = {p: float(row[f"p{p} latency"]) / 1e3 for p in (50, 95, 99)}  # CSV is in µs
    measurement = Measurement(
        concurrency=concurrency,
        throughput=float(row["Inferences/Second"]) / batch_size,
        p50_ms=ms[50],
        p95_ms=ms[95],
        p99_ms=ms[99],
        requests=-1,  # perf_analyzer reports rates, not counts
        errors=0,
    )
    usage = ClientUsage(cpu_s, wall_s, peak, client_threads, cpus, host_cores())
    return Level(measurement, mean_latency_ms(row), usage)
