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
from tritonrepo_client.control.repository_key import (
    ENV_KEY,
    ENV_KEY_FILE,
    GRPC_HEADER,
    HEADER,
    RepositoryKeyError,
    find_key,
    headers,
    read_key_file,
    resolve_key,
)

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


__all__ = [
    "DEFAULT_KEY_FILE",
    "ENV_KEY",
    "ENV_KEY_FILE",
    "GRPC_HEADER",
    "HEADER",
    "RESTRICTED_APIS",
    "RepositoryKeyError",
    "create_key_file",
    "find_key",
    "headers",
    "read_key_file",
    "resolve_key",
    "restriction",
]
