"""What the client knows about a model repository on this machine, when there is one.

The control commands check a model folder before they ask a server to load it, and read the key
that locks the admin APIs. Both live with the repository, not with the client: the package that
serves the repository (``tritonrepo.server.local``) registers them under the entry-point group
``tritonrepo_client.local``. Installed without it, the client falls back to
``./model_repository`` and ``./build/repository.key`` and skips the repository's own checks.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from importlib.metadata import entry_points
from pathlib import Path

GROUP = "tritonrepo_client.local"


def _no_checks(repository: Path, model: str, config_name: str | None) -> list[str]:
    return []


@dataclass(frozen=True)
class LocalRepository:
    """A model repository on this machine.

    Attributes:
        model_repository: its folder.
        key_file: where the launcher keeps the admin-API key (mode 0600).
        check: ``(repository, model, config_name) -> problems``, one line each: the repository's
            own checks of ``model`` and what it depends on (empty = nothing found).
        checks_name: how to run those checks by hand, shown in messages.
    """

    model_repository: Path
    key_file: Path
    check: Callable[[Path, str, str | None], list[str]] = field(default=_no_checks)
    checks_name: str = ""


@cache
def local_repository() -> LocalRepository:
    """The registered :class:`LocalRepository`, or the fallback relative to the working
    directory when no package registers one or the one registered does not import (said on
    stderr, so a broken server install does not take the client's commands with it)."""
    for entry in entry_points(group=GROUP):
        try:
            found = entry.load()
        except ImportError as exc:
            print(
                f"warning: {GROUP} entry point {entry.value}: {exc}; using ./model_repository "
                "and no repository checks",
                file=sys.stderr,
            )
            break
        return found() if callable(found) else found
    cwd = Path.cwd()
    return LocalRepository(cwd / "model_repository", cwd / "build" / "repository.key")
