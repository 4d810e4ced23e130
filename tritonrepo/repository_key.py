"""The key that guards Triton's admin APIs (``RESTRICTED_APIS``: model repository, shared memory,
logging, trace).

Triton restricts API categories with ``--http-restricted-api=<categories>:<header>=<key>`` and
``--grpc-restricted-protocol=<categories>:<header>=<key>``; a request of those categories must
then carry ``<header>: <key>`` (HTTP) or the metadata ``triton-grpc-protocol-<header>: <key>``
(gRPC; the prefix is Triton's, see its error "expecting header
'triton-grpc-protocol-<header>'"). Health, metadata, inference, model configs and statistics
stay open (why: ``RESTRICTED_APIS``).

The key comes from, in order: an explicit file, ``$TRITONREPO_REPOSITORY_KEY``,
``$TRITONREPO_REPOSITORY_KEY_FILE``, or ``build/repository.key`` (which the launcher creates
with mode 0600 when no key is given). It is never committed (``build/`` is git-ignored).
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from tritonrepo.paths import BUILD_DIR

HEADER = "x-model-repository-key"
GRPC_HEADER = f"triton-grpc-protocol-{HEADER}"
ENV_KEY = "TRITONREPO_REPOSITORY_KEY"
ENV_KEY_FILE = "TRITONREPO_REPOSITORY_KEY_FILE"
DEFAULT_KEY_FILE = BUILD_DIR / "repository.key"
# Triton API categories only key holders may call, on HTTP and gRPC (Triton's names, server
# docs "Limit Endpoint Access"): those that change server state or expose its memory.
# - model-repository: index, load (with config and file overrides), unload.
# - shared-memory: system and CUDA regions; registering a region names memory the server then
#   reads and writes (e.g. a Python backend's own /dev/shm region, seen accepted when open).
# - logging: log levels and files (verbose logs can fill a disk).
# - trace: trace levels and rates.
# Left open: health, metadata and inference (what callers are for); model-config (clients read
# max_batch_size and inputs from it, and it holds no secret); statistics (the same counters are
# on the metrics endpoint, which Triton cannot restrict, so a key would protect nothing).
RESTRICTED_APIS = ("model-repository", "shared-memory", "logging", "trace")


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


def find_key(key_file: str | Path | None = None) -> tuple[str, str] | None:
    """``(key, where it came from)`` from ``key_file``, the environment or
    ``build/repository.key``, in that order; ``None`` if there is none.

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
    if DEFAULT_KEY_FILE.is_file():
        return read_key_file(DEFAULT_KEY_FILE), str(DEFAULT_KEY_FILE)
    return None


def resolve_key(key_file: str | Path | None = None) -> str | None:
    """The key :func:`find_key` finds, or ``None``.

    Raises:
        RepositoryKeyError: as :func:`find_key`.
    """
    found = find_key(key_file)
    return found[0] if found else None


def create_key_file(path: Path | None = None) -> str:
    """Write a fresh random key (32 bytes, URL-safe base64) with mode 0600 to ``path``
    (default ``build/repository.key``) and return it."""
    path = path or DEFAULT_KEY_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(key + "\n")
    return key


def restriction(key: str) -> str:
    """The value of ``--http-restricted-api`` / ``--grpc-restricted-protocol`` that locks
    ``RESTRICTED_APIS`` with ``key``."""
    return f"{','.join(RESTRICTED_APIS)}:{HEADER}={key}"


def headers(key: str | None, protocol: str) -> dict[str, str]:
    """Request headers (HTTP) or metadata (gRPC) that carry ``key``; empty without a key."""
    if not key:
        return {}
    return {(HEADER if protocol == "http" else GRPC_HEADER): key}
