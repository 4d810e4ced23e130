"""The key that unlocks Triton's admin APIs, on the client side: where it is read from and the
header that carries it.

Triton restricts API categories with ``--http-restricted-api=<categories>:<header>=<key>`` and
``--grpc-restricted-protocol=<categories>:<header>=<key>``; a request of those categories must
then carry ``<header>: <key>`` (HTTP) or the metadata ``triton-grpc-protocol-<header>: <key>``
(gRPC; the prefix is Triton's, see its error "expecting header
'triton-grpc-protocol-<header>'"). The server side (which categories, the key file it creates)
is ``tritonrepo.server.repository_key``.

The key comes from, in order: an explicit file, ``$TRITONREPO_REPOSITORY_KEY``,
``$TRITONREPO_REPOSITORY_KEY_FILE``, or the local repository's key file
(:func:`tritonrepo_client.control.local.local_repository`; ``build/repository.key`` of the
checkout, which the launcher creates with mode 0600 when no key is given).
"""

from __future__ import annotations

import os
from pathlib import Path

from tritonrepo_client.control.local import local_repository

HEADER = "x-model-repository-key"
GRPC_HEADER = f"triton-grpc-protocol-{HEADER}"
ENV_KEY = "TRITONREPO_REPOSITORY_KEY"
ENV_KEY_FILE = "TRITONREPO_REPOSITORY_KEY_FILE"


class RepositoryKeyError(ValueError):
    """The configured key file is missing, unreadable or empty."""


def read_key_file(path: str | Path) -> str:
    """The key stored in ``path`` (surrounding whitespace stripped).

    Raises:
        RepositoryKeyError: the file does not exist or holds no key.
    """
    try:
        key = Path(path).read_text().strip()
    except OSError as exc:
        raise RepositoryKeyError(
            f"cannot read repository key file {path}: {exc.strerror}"
        ) from None
    if not key:
        raise RepositoryKeyError(f"repository key file {path} is empty")
    return key


def find_key(
    key_file: str | Path | None = None, default_file: Path | None = None
) -> tuple[str, str] | None:
    """``(key, where it came from)`` from ``key_file``, the environment or the default file
    (``default_file``, else the local repository's: ``build/repository.key`` of the checkout),
    in that order; ``None`` if there is none.

    Raises:
        RepositoryKeyError: an explicitly named file (argument or
            ``$TRITONREPO_REPOSITORY_KEY_FILE``) cannot be read.
    """
    if key_file:
        return read_key_file(key_file), str(key_file)
    if os.environ.get(ENV_KEY):
        return os.environ[ENV_KEY].strip(), f"${ENV_KEY}"
    if os.environ.get(ENV_KEY_FILE):
        return read_key_file(os.environ[ENV_KEY_FILE]), os.environ[ENV_KEY_FILE]
    default = default_file or local_repository().key_file
    if default.is_file():
        return read_key_file(default), str(default)
    return None


def resolve_key(key_file: str | Path | None = None) -> str | None:
    """The key :func:`find_key` finds, or ``None``.

    Raises:
        RepositoryKeyError: as :func:`find_key`.
    """
    found = find_key(key_file)
    return found[0] if found else None


def headers(key: str | None, protocol: str) -> dict[str, str]:
    """Request headers (HTTP) or metadata (gRPC) that carry ``key``; empty without a key."""
    if not key:
        return {}
    return {(HEADER if protocol == "http" else GRPC_HEADER): key}
