"""This checkout's model repository, as the client sees it (entry point
``tritonrepo_client.local``: :mod:`tritonrepo_client.control.local`): its folder, its admin-API
key file and the preflight as the check before a load."""

from __future__ import annotations

from pathlib import Path

from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.server import preflight, repository_key
from tritonrepo_client.control.local import LocalRepository


def preflight_problems(repository: Path, model: str, config_name: str | None) -> list[str]:
    """The preflight's errors for ``model`` and what it depends on, one line each (the shared
    memory check, which is about the whole server, is left out)."""
    findings = preflight.run(repository, [model], config_name)
    return [
        f"{f.model}: {f.message}" for f in findings if f.level == "error" and f.model != "/dev/shm"
    ]


def checkout() -> LocalRepository:
    """The :class:`~tritonrepo_client.control.local.LocalRepository` of this checkout."""
    return LocalRepository(
        MODEL_REPOSITORY,
        repository_key.DEFAULT_KEY_FILE,
        preflight_problems,
        "python -m tritonrepo.server.preflight",
    )
