"""``make profile``: where the served ``text_embedding`` ensemble spends its time under load.

Starts the server, drives ``text_embedding`` with perf_analyzer at ``--concurrency`` on the real
texts, and meanwhile

* samples every Python-backend stub with py-spy (``--native``, so time inside ONNX Runtime and
  numpy shows up), writing its collapsed stacks per step (``<step>.txt``, the input format of
  flamegraph.pl and speedscope) and printing the top functions;
* reads the CPU time of every process involved from ``/proc`` (server, stubs, load generator);
* takes Triton's per-step statistics (queue, compute input, infer, compute output per request).

Everything goes to ``build/bench/profile/``; the summary is printed. py-spy needs ptrace
permission over the stubs (root, or ``kernel.yama.ptrace_scope=0``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from benchmarks.harness import inputs, perf_analyzer
from benchmarks.harness.triton_side import start_server, step_stats
from tritonrepo.paths import BUILD_DIR
from tritonrepo.text import spec

STEPS = (spec.TOKENIZE_MODEL, spec.ENCODER_MODEL, spec.NORMALIZE_MODEL)


def stub_pids() -> dict[str, int]:
    """``{model: pid}`` of the running Python-backend stubs (first instance of each model)."""
    found: dict[str, int] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmdline and cmdline[0].endswith(b"triton_python_backend_stub"):
            model = Path(cmdline[1].decode()).parent.parent.name  # <repo>/<model>/<v>/model.py
            found.setdefault(model, int(pid))
    return found


def cpu_seconds() -> dict[int, tuple[str, float]]:
    """``{pid: (command, user+system CPU seconds)}`` of every process."""
    ticks = os.sysconf("SC_CLK_TCK")
    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            name = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, UnicodeDecodeError):
            continue
        fields = stat.rsplit(")", 1)[1].split()
        out[int(pid)] = (name[:120], (int(fields[11]) + int(fields[12])) / ticks)
    return out


def record(pid: int, seconds: int, raw: Path) -> subprocess.Popen:
    """py-spy sampling ``pid`` at 100 Hz for ``seconds`` into ``raw`` (collapsed stacks)."""
    spy = Path(sys.executable).parent / "py-spy"
    command = [str(spy), "record", "-p", str(pid), "-d", str(seconds), "-r", "100", "--native"]
    return subprocess.Popen(
        [*command, "-f", "raw", "-o", str(raw)], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT
    )


def top_frames(raw: Path, limit: int = 8) -> list[tuple[float, str]]:
    """The functions with the most inclusive samples in a py-spy ``raw`` (collapsed) file."""
    total, inclusive = 0, Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        total += int(count)
        for frame in set(stack.split(";")):
            inclusive[frame] += int(count)
    return [(100 * n / max(total, 1), frame) for frame, n in inclusive.most_common(limit)]


def main(argv: list[str] | None = None) -> int:
    """Profile once; exit 1 when the server or perf_analyzer cannot run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--seconds", type=int, default=15, help="sampling time")
    parser.add_argument("--output", type=Path, default=BUILD_DIR / "bench" / "profile")
    args = parser.parse_args(argv)
    out = args.output
    out.mkdir(parents=True, exist_ok=True)
    data = inputs.write_text_data(out / "texts.json", inputs.texts(512))
    with start_server(out, (spec.ENSEMBLE,)) as server:
        load = subprocess.Popen(
            [perf_analyzer.binary(), "-m", spec.ENSEMBLE, "-u", server.options.grpc_url,
             "-i", "grpc", "--input-data", str(data), "--concurrency-range",
             str(args.concurrency), "--measurement-interval", str(1000 * (args.seconds + 10)),
             "--max-trials", "1"],
            env=perf_analyzer.environment(), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            time.sleep(4)  # past the warm-up
            before_cpu = cpu_seconds()
            before = {m: step_stats(server, m) for m in STEPS}
            spies = [record(pid, args.seconds, out / f"{m}.txt") for m, pid in stub_pids().items()]
            for process in spies:
                process.wait(timeout=args.seconds + 60)
            after_cpu = cpu_seconds()
            stats = {m: step_stats(server, m).since(before[m]) for m in STEPS}
        finally:
            load.kill()
    used = sorted(
        ((cpu - before_cpu.get(pid, ("", 0.0))[1], name) for pid, (name, cpu) in after_cpu.items()),
        reverse=True,
    )
    window = args.seconds  # CPU seconds / wall seconds = cores busy
    print(f"CPU by process over {window} s at concurrency {args.concurrency} (100 % = 1 core):")
    for seconds, name in used[:6]:
        print(f"  {100 * seconds / window:5.0f} %  {name}")
    print("Triton per-step statistics, ms per request:")
    for model, step in stats.items():
        parts = ", ".join(f"{k} {v:.2f}" for k, v in step.per_request_ms().items())
        print(f"  {model}: {parts}; average batch {step.average_batch:.1f}")
    for model in STEPS:
        raw = out / f"{model}.txt"
        if raw.is_file():
            print(f"py-spy, {model} (inclusive share of samples; stacks in {model}.txt):")
            for share, frame in top_frames(raw):
                print(f"  {share:5.1f} %  {frame[:110]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
