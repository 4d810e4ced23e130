"""Facts about the machine and software a benchmark ran on, for the report's header."""

from __future__ import annotations

import os
import platform
from importlib import metadata

PACKAGES = (
    "nvidia-pytriton",
    "tritonclient",
    "onnxruntime",
    "torch",
    "sentence-transformers",
    "numpy",
    "fastapi",
    "gunicorn",
)


def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (``platform.processor()`` elsewhere)."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def memory_gib() -> str:
    """Total memory in GiB from ``/proc/meminfo`` ('' elsewhere)."""
    try:
        with open("/proc/meminfo") as fh:
            kib = int(fh.readline().split()[1])
        return f"{kib / 2**20:.0f} GiB"
    except (OSError, ValueError, IndexError):
        return ""


def cpu_flags() -> str:
    """The vector/int8 instruction sets present (they decide which INT8 kernels run)."""
    wanted = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8")
    try:
        with open("/proc/cpuinfo") as fh:
            flags = next(line for line in fh if line.startswith("flags")).split()
    except (OSError, StopIteration):
        return ""
    return " ".join(f for f in wanted if f in flags)


def facts() -> dict[str, str]:
    """``{name: value}``: CPU, cores, memory, OS, Python and the versions of ``PACKAGES``."""
    out = {
        "cpu": cpu_model(),
        "cores": str(len(os.sched_getaffinity(0))),
        "memory": memory_gib(),
        "cpu_flags": cpu_flags(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "tritonserver": "2.51.0 (nvidia-pytriton 0.7.0, = NGC 24.10)",
    }
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out
