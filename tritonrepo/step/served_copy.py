"""A copy of a served Python model, loaded under another name, runs as one version of it.

A canary of a pipeline served as one Python model (the one-step CPU model of a described
pipeline) loads ``<pipeline>__canary`` through Triton's load API
(``tritonrepo_client.control.one_step_canary``): the pipeline's config, renamed, with the
parameter :data:`AS_VERSION_PARAMETER` = ``{"model": "<pipeline>", "version": N}``, and one
uploaded file, the entry point ``1/model.py``. Triton writes an upload to a temporary folder
outside the repository, so the copy's version folder is taken to be version N of the named
model in the server's repository: its code, its core file and its drift profile are found
where that version's are. The repository is the one tritonserver was started with
(``--model-repository``/``--model-store``, read from the parent process's command line,
``/proc/<ppid>/cmdline``: the stub's parent is the server, python_backend
``stub_launcher.cc``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

# The same name in tritonrepo_client.control.one_step_canary (tests/unit/test_served_copy.py).
AS_VERSION_PARAMETER = "tritonrepo_as_version"
REPOSITORY_FLAGS = ("--model-repository", "--model-store")  # tritonserver's spellings


def repository_paths(args: Sequence[str]) -> list[Path]:
    """The model repositories named in tritonserver's command line ``args``
    (``--model-repository=P`` or ``--model-repository P``, any number of times)."""
    paths = []
    for i, arg in enumerate(args):
        for flag in REPOSITORY_FLAGS:
            if arg.startswith(flag + "="):
                paths.append(Path(arg.split("=", 1)[1]))
            elif arg == flag and i + 1 < len(args):
                paths.append(Path(args[i + 1]))
    return paths


def served_version_dir(value: str, server_pid: int | None = None) -> Path:
    """The version folder a copy runs as: ``<repository>/<model>/<version>`` for the
    parameter's JSON ``value`` ``{"model": str, "version": int}``.

    Args:
        value: the :data:`AS_VERSION_PARAMETER` string.
        server_pid: tritonserver's process id (default: this process's parent).

    Raises:
        ValueError: the value is not such a JSON object, the server's command line names no
            repository, or no repository has that version folder (the load fails with this).
    """
    try:
        named = json.loads(value)
        model, version = str(named["model"]), int(named["version"])
    except (ValueError, KeyError, TypeError):
        raise ValueError(
            f'{AS_VERSION_PARAMETER} {value!r}: give a JSON object {{"model": name, '
            '"version": number}'
        ) from None
    pid = server_pid if server_pid is not None else os.getppid()
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError as exc:
        raise ValueError(f"cannot read the server's command line: {exc}") from None
    repositories = repository_paths(args)
    for repository in repositories:
        folder = repository / model / str(version)
        if folder.is_dir():
            return folder
    raise ValueError(
        f"{AS_VERSION_PARAMETER}: no folder {model}/{version} in the server's repositories "
        f"{[str(r) for r in repositories]}: build that version first"
    )
