"""What one running server shows of itself: its Python-backend stub processes (found in Linux
``/proc`` by the server's shared-memory prefix), their regions in ``/dev/shm``, and its
Prometheus metrics. Used by :class:`tritonrepo.server.launcher.TritonServer`, the supervisor, the
healer, the soak run and the tests that kill stubs."""

from __future__ import annotations

import contextlib
import re
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tritonrepo_client.control.healing.healer import instance_model

# Where the Python backend's stubs keep their shared-memory regions (POSIX shm_open names).
SHM_DIRECTORY = Path("/dev/shm")


# Triton's instance names when the config names no instance group: the group is
# ``<model>_<group index>`` and its instances ``<group>_<instance index>`` (core
# ``model_config_utils.cc``, which names unnamed groups).
_INSTANCE_NAME = re.compile(r"^.+_\d+_\d+$")


def is_instance_name(name: str) -> bool:
    """Whether a stub's name is a model instance's, ``<model>_<group>_<index>`` (e.g.
    ``ctr_session_0_0``), rather than the bare model name of the stub Triton 2.51 runs for the
    length of a load (``ctr_session``)."""
    return bool(_INSTANCE_NAME.match(name))


@dataclass(frozen=True)
class StubProcess:
    """One Python-backend stub process of a server (one per model instance).

    Attributes:
        pid: its process id.
        instance: Triton's instance name, ``<model>_<group>_<index>`` (e.g.
            ``text_embedding_tokenize_0_0``), as in "Stub process '...' is not healthy".
        model: the model it serves (``instance`` without the two indices).
        region: its shared-memory region's name in ``/dev/shm``.
    """

    pid: int
    instance: str
    model: str
    region: str


def stub_process(pid: int, shm_prefix: str) -> StubProcess | None:
    """The stub of ``pid`` if it belongs to the server with ``shm_prefix``; its command line is
    ``stub <model file> <shm region> <default bytes> <growth bytes> <parent pid> <python backend
    dir> <ipc bytes> <instance name> <runtime>`` (python_backend ``stub_launcher.cc``)."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return None
    if len(args) < 9 or not args[0].endswith("triton_python_backend_stub"):
        return None
    if not args[2].startswith(shm_prefix):
        return None
    instance = args[8]
    return StubProcess(pid, instance, instance_model(instance), args[2])


def stub_processes(shm_prefix: str) -> list[StubProcess]:
    """The live stub processes whose region starts with ``shm_prefix`` (one server's), by
    instance name."""
    stubs = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stub = stub_process(int(entry.name), shm_prefix)
            if stub is not None:
                stubs.append(stub)
    return sorted(stubs, key=lambda s: s.instance)


def region_exists(region: str) -> bool:
    """Whether the shared-memory region ``region`` (a stub's, as its command line names it) is
    in ``/dev/shm``."""
    return (SHM_DIRECTORY / region.lstrip("/")).exists()


def shared_memory_regions(shm_prefix: str) -> list[Path]:
    """The regions in ``/dev/shm`` whose names start with ``shm_prefix`` (one per stub process;
    each grows to the largest request its stub carried)."""
    return sorted(SHM_DIRECTORY.glob(f"{shm_prefix}*"))


def remove_shared_memory(shm_prefix: str) -> list[Path]:
    """Remove the regions :func:`shared_memory_regions` lists, after the server has exited: a
    stub that was killed never unlinks its region, and Triton does not either.

    Returns the paths removed.
    """
    removed = []
    for path in shared_memory_regions(shm_prefix):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            removed.append(path)
    return removed


def metric_values(metrics_url: str, name: str, timeout_s: float = 30.0) -> dict[str, float]:
    """``{label set: value}`` of the Prometheus metric ``name`` (``""`` for a series without
    labels) from ``metrics_url`` (``http://host:port/metrics``), read within ``timeout_s``
    seconds.

    Raises:
        OSError: the endpoint does not answer.
    """
    with urllib.request.urlopen(metrics_url, timeout=timeout_s) as response:
        text = response.read().decode()
    pattern = re.compile(rf"^{re.escape(name)}(\{{[^}}]*\}})? (\S+)$", re.M)
    return {m.group(1) or "": float(m.group(2)) for m in pattern.finditer(text)}
