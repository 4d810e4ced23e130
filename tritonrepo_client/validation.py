"""Checks on what a client is about to send, so a mistake is named before Triton sees it.

Triton answers a config override in the wrong schema with "failed to poll from model
repository", a correlation ID beyond uint64 with "Unable to parse 'sequence_id'", and a string
ID over 128 characters with UNIMPLEMENTED. These functions refuse them first, naming the file
and the field.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2

# Numeric correlation IDs are uint64 (KServe v2 sequence extension: "sequence_id" is an unsigned
# 64-bit integer or a string); 0 means "not part of a sequence" and the sequence batcher
# refuses it.
MAX_NUMERIC_CORRELATION_ID = 2**64 - 1
# tritonclient 2.51's gRPC client sends a numeric ID as the request's int64_param, so over gRPC
# it ends at 2**63 - 1 (larger ones fail in the client with "Value out of range").
MAX_GRPC_CORRELATION_ID = 2**63 - 1
# Longest string correlation ID Triton 2.51 accepts, in bytes of UTF-8 (129 was refused with
# UNIMPLEMENTED here; tests/server/test_reliability.py checks both sides on the real server).
MAX_STRING_CORRELATION_ID_BYTES = 128
# Backends whose version folders must hold a model.py (Python-based backends such as
# onnxruntime_python bring their own).
PYTHON_BACKEND = "python"


class InvalidOverride(ValueError):
    """A config override or override files that Triton would refuse or hang on."""


class InvalidCorrelationId(ValueError):
    """A correlation ID outside 1..2**64-1, or a string ID empty or over 128 bytes."""


def check_config(config: Any, source: str = "config override") -> None:
    """Check that ``config`` (ModelConfig JSON as Triton's load API takes it) parses into
    the ``ModelConfig`` protobuf of tritonclient 2.51.

    Args:
        config: the override, a dict with ModelConfig JSON field names (``input``,
            ``data_type: "TYPE_INT64"``, ``dims``, ...).
        source: what to name in the message (a file path, "rollout of X", ...).

    Raises:
        InvalidOverride: not a JSON object, or a field name, type or enum value protobuf
            refuses; the message names ``source`` and the field path (e.g.
            ``ModelConfig.input[0].data_type``).
    """
    if not isinstance(config, dict):
        raise InvalidOverride(f"{source}: a ModelConfig must be a JSON object, got {type(config)}")
    try:
        json_format.ParseDict(config, model_config_pb2.ModelConfig())
    except json_format.ParseError as exc:
        raise InvalidOverride(f"{source}: not a valid ModelConfig: {exc}") from None


def read_config_file(path: Path) -> dict[str, Any]:
    """Read and check a JSON ModelConfig override file (``models load --config``).

    Raises:
        InvalidOverride: the file is not JSON (line and column named) or not a ModelConfig.
        OSError: it cannot be read.
    """
    text = Path(path).read_text(encoding="utf-8")
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidOverride(
            f"{path}: not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    check_config(config, str(path))
    return config


def check_files(config: dict[str, Any], files: dict[str, bytes], source: str) -> None:
    """Check override files against their config: keys are ``file:<version>/<path>``, and a
    Python model (``backend: "python"`` without a Python-based runtime) has a ``model.py`` in
    every uploaded version: Triton 2.51 never finishes loading one without it (the model stays
    LOADING until the server restarts).

    Raises:
        InvalidOverride: a key that is not ``file:<version>/<path>``, or a missing model.py.
    """
    versions: set[str] = set()
    for key in files:
        version, _, rest = key.removeprefix("file:").partition("/")
        if not key.startswith("file:") or not version.isdigit() or not rest:
            raise InvalidOverride(
                f"{source}: override file key {key!r} is not file:<version>/<path>"
            )
        versions.add(version)
    if config.get("backend") != PYTHON_BACKEND or config.get("runtime"):
        return
    missing = sorted(v for v in versions if f"file:{v}/model.py" not in files)
    if missing:
        raise InvalidOverride(
            f"{source}: Python model version(s) {', '.join(missing)} have no model.py; Triton "
            "would never finish loading them"
        )


def check_correlation_id(
    value: int | str, field: str = "correlation_id", protocol: str = "http"
) -> int | str:
    """Check a sequence's correlation ID before it is sent.

    Args:
        value: an int in 1..2**64-1 (1..2**63-1 over gRPC) or a str of 1..128 bytes in UTF-8.
        field: the name to put in the message (e.g. ``--correlation-id``).
        protocol: ``"http"`` or ``"grpc"`` (the numeric range differs).

    Returns:
        ``value`` unchanged.

    Raises:
        InvalidCorrelationId: anything else (bool, 0, negative, too large, "", > 128 bytes).
    """
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise InvalidCorrelationId(f"{field} must be an int or a str, got {type(value).__name__}")
    if isinstance(value, int):
        top, label = (
            (MAX_GRPC_CORRELATION_ID, "2**63-1 over gRPC")
            if protocol == "grpc"
            else (MAX_NUMERIC_CORRELATION_ID, "2**64-1")
        )
        if not 1 <= value <= top:
            raise InvalidCorrelationId(
                f"{field} {value} is out of range: numeric correlation IDs are 1..{label} "
                f"({top}); 0 means no sequence; use a string ID otherwise"
            )
        return value
    size = len(value.encode("utf-8"))
    if not 1 <= size <= MAX_STRING_CORRELATION_ID_BYTES:
        raise InvalidCorrelationId(
            f"{field} is {size} bytes: string correlation IDs are "
            f"1..{MAX_STRING_CORRELATION_ID_BYTES} bytes of UTF-8 (Triton 2.51's limit)"
        )
    return value


def parse_correlation_id(
    text: str, field: str = "--correlation-id", protocol: str = "http"
) -> int | str:
    """A command-line correlation ID: digits are a numeric ID, anything else a string ID;
    checked with :func:`check_correlation_id` for ``protocol``.

    Raises:
        InvalidCorrelationId: see :func:`check_correlation_id`.
    """
    value: int | str = int(text) if text.isascii() and text.isdigit() else text
    return check_correlation_id(value, field, protocol)
