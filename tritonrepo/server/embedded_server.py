"""Where the embedded ``tritonserver`` and its backends come from, and what its processes need.

``nvidia-pytriton==0.7.0`` bundles ``tritonserver`` 2.51.0, the Python backend and one Python-
backend stub per Python version. :func:`assemble_backend_directory` lays out
``--backend-directory`` from it and this repository's Python-based backends;
:func:`server_environment` (with :func:`library_path` and :func:`stub_python`) is the server's
environment, and so its stubs'; :func:`visible_gpus` sizes the CUDA memory pool of the GPU
config sets. Used by :mod:`tritonrepo.server.launcher` and :mod:`tritonrepo.server.stub_numpy`.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path

from tritonrepo.paths import BACKENDS_SOURCE, BUILD_DIR

# libc, loaded once here: a child runs terminate_with_parent() between fork and exec, where
# loading a library (or importing) is not safe while other threads of the parent run.
try:
    _LIBC: ctypes.CDLL | None = ctypes.CDLL("libc.so.6", use_errno=True)
except OSError:  # not glibc Linux: children then do not follow their parent's death
    _LIBC = None
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def terminate_with_parent() -> None:
    """In a child before exec (``preexec_fn``): SIGTERM it when its parent dies, even by
    SIGKILL (Linux ``prctl(PR_SET_PDEATHSIG)``). Only where :func:`tied_to_parent` finds no
    ``setpriv``."""
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def tied_to_parent(command: list[str]) -> tuple[list[str], Callable[[], None] | None]:
    """``command`` and the ``preexec_fn`` to start it with so that its process gets SIGTERM
    when its parent dies, even by SIGKILL (Linux ``PR_SET_PDEATHSIG``): no server, guard or
    tool outlives its launcher or test run. The kernel ties this to the thread that started
    it: start children from threads that live as long as they do (the main thread, the crash
    watcher).

    util-linux's ``setpriv --pdeathsig TERM`` (Debian and Ubuntu always have it) sets it and
    execs the command, so no ``preexec_fn`` is needed and Python starts the child with vfork,
    where no fork handler runs. With a ``preexec_fn`` Python forks, and gRPC's fork handler
    (grpcio 1.81 and later, grpc/grpc#43055) restarts its poller thread in the child, which
    aborts it with "epoll_wait error: Bad file descriptor" once Popen closed the inherited
    descriptors: a launch that dies by SIGABRT before it runs anything. ``setpriv`` sets the
    signal after Popen returned, so a parent that dies within that millisecond leaves its
    child running. Without ``setpriv`` the ``prctl`` runs in the ``preexec_fn``
    (:func:`terminate_with_parent`).

    Returns:
        ``(command to run, preexec_fn or None)``.
    """
    setpriv = shutil.which("setpriv")
    if setpriv is not None:
        return [setpriv, "--pdeathsig", "TERM", "--", *command], None
    return command, terminate_with_parent


STUB_PYTHON_ENV = "TRITONREPO_STUB_PYTHON"


class LaunchError(RuntimeError):
    """The server could not be started or a model could not be loaded; the message is one line."""


def _pytriton_root() -> Path:
    try:
        import pytriton
    except ImportError as exc:
        raise LaunchError(
            "nvidia-pytriton is not installed in this environment; run `make setup`"
        ) from exc
    return Path(pytriton.__file__).resolve().parent


def tritonserver_binary() -> Path:
    """Path of the bundled ``tritonserver`` binary.

    Raises:
        LaunchError: nvidia-pytriton is missing or ships no binary.
    """
    binary = _pytriton_root() / "tritonserver" / "bin" / "tritonserver"
    if not binary.is_file():
        raise LaunchError(f"tritonserver binary not found at {binary}; reinstall nvidia-pytriton")
    return binary


def library_path() -> str:
    """``LD_LIBRARY_PATH`` for the server and the Python backend stub."""
    libs = _pytriton_root().parent / "nvidia_pytriton.libs"
    parts = [str(libs), sysconfig.get_config_var("LIBDIR") or ""]
    parts += [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
    return os.pathsep.join(p for p in parts if p)


def _copy(source: Path, dest: Path) -> None:
    """Copy unless ``dest`` already matches (copies, not symlinks: Triton rejects a backend
    library whose real path escapes the backend directory)."""
    if dest.is_file() and not dest.is_symlink() and dest.read_bytes() == source.read_bytes():
        return
    if dest.is_symlink() or dest.exists():
        dest.unlink()
    tmp = dest.with_name(dest.name + f".tmp{os.getpid()}")
    shutil.copy2(source, tmp)
    os.replace(tmp, dest)


def assemble_backend_directory(dest: Path = BUILD_DIR / "triton" / "backends") -> Path:
    """Lay out ``--backend-directory``: ``python/`` plus one folder per Python-based backend.

    ``python/`` holds ``libtriton_python.so``, ``triton_python_backend_utils.py`` and the stub built
    for the running Python (``sys.version_info``); each ``backends/<name>/model.py`` of this
    repository becomes ``<dest>/<name>/model.py`` (Triton's "Python-based backends", ≥ 2.39).

    Raises:
        LaunchError: the wheel has no stub for this Python version.
    """
    root = _pytriton_root() / "tritonserver"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = root / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.is_file():
        raise LaunchError(f"nvidia-pytriton has no Python backend stub for Python {version}")
    python_dir = dest / "python"
    python_dir.mkdir(parents=True, exist_ok=True)
    for name in ("libtriton_python.so", "triton_python_backend_utils.py"):
        _copy(root / "backends" / "python" / name, python_dir / name)
    _copy(stub, python_dir / "triton_python_backend_stub")
    for model_py in sorted(BACKENDS_SOURCE.glob("*/model.py")):
        backend_dir = dest / model_py.parent.name
        backend_dir.mkdir(parents=True, exist_ok=True)
        _copy(model_py, backend_dir / "model.py")
    return dest


def stub_python() -> Path:
    """The Python whose packages the Python backend stubs import: ``$TRITONREPO_STUB_PYTHON``
    or this interpreter. The server starts with its ``bin/`` first on ``PATH``, where the stub's
    embedded interpreter finds its environment. The 2.51 stub needs numpy < 2 there (with
    numpy 2 it reads tensors wrong: seen, FP32 [0.5, 1.5, 2.5, 3.5] arrived as four 0.5s), so
    a host whose own Python needs numpy 2 points this at a venv with numpy 1.26."""
    return Path(os.environ.get(STUB_PYTHON_ENV) or sys.executable)


def server_environment() -> dict[str, str]:
    """The environment of the server, and so of its Python-backend stubs: this process's, with
    :func:`library_path` as ``LD_LIBRARY_PATH`` and the ``bin/`` of :func:`stub_python` first on
    ``PATH`` (``PYTHONPATH`` and the rest as they are here).

    Raises:
        LaunchError: nvidia-pytriton is not installed.
    """
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = library_path()
    env["PATH"] = os.pathsep.join([str(stub_python().parent), env.get("PATH", "")])
    env.setdefault("HF_HUB_OFFLINE", "1")
    return env


def visible_gpus() -> list[int]:
    """Indices of the GPUs this process sees (``CUDA_VISIBLE_DEVICES`` order), [] without any;
    asks PyTorch, which is installed wherever a GPU config set runs."""
    try:
        import torch
    except ImportError:
        return []
    return list(range(torch.cuda.device_count()))
