"""What a failed probe says about the steps behind it: the probe itself, the dead stubs an error
names, and whether a model runs in Python-backend stub processes (read by
:class:`tritonrepo_client.control.healing.healer.Healer`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

from tritonrepo_client.connection import ClientError, ServerUnreachable, TritonConnection
from tritonrepo_client.control.health import is_overload, probe_for
from tritonrepo_client.errors import DeadlineExceeded
from tritonrepo_client.triton_messages import dead_stub_instances

# Backends whose instances run in Python-backend stub processes: the Python backend and this
# repository's Python-based backends (backends/onnxruntime_python, backends/torch_python).
_STUB_BACKEND = re.compile(r"^python$|_python$")


def instance_model(instance: str) -> str:
    """The model of a Triton instance name ``<model>_<group>_<index>``, e.g.
    ``text_embedding_tokenize_0_0`` -> ``text_embedding_tokenize``."""
    return re.sub(r"_\d+_\d+$", "", instance)


T = TypeVar("T")


def twice_on_deadline(fn: Callable[[], T]) -> T:
    """``fn()``, tried once more when it misses its deadline (:class:`DeadlineExceeded`): the
    HTTP client drops a connection whose call timed out, and the retry's new connection is
    served by another of Triton's frontend threads (see the module docstring).

    Raises:
        DeadlineExceeded: the second try missed its deadline too.
        ClientError: what ``fn`` raised otherwise.
    """
    try:
        return fn()
    except DeadlineExceeded:
        return fn()


def dead_stub_models(error: str) -> list[str]:
    """Models whose stubs an error names as not healthy (:data:`Kind.DEAD_STUB`), in order,
    without repeats."""
    return list(dict.fromkeys(instance_model(m) for m in dead_stub_instances(error)))


def runs_in_stubs(config: dict[str, Any]) -> bool:
    """Whether a model (its config, ModelConfig JSON) runs in Python-backend stub processes."""
    return bool(_STUB_BACKEND.search(config.get("backend") or ""))


def probe(conn: TritonConnection, model: str, rounds: int = 2) -> str | None:
    """Model readiness, then the model's probe inference (the one its config declares:
    :func:`tritonrepo_client.control.health.probe_for`) ``rounds`` times (a model
    with several instances may answer the first from a healthy one).

    Returns:
        None when the model serves (a probe Triton refused for overload counts: the model is
        busy, not broken), else the error (one line).

    Each call is bounded by ``conn``'s timeout and tried once more when it misses it
    (:func:`twice_on_deadline`).

    Raises:
        ServerUnreachable: the server does not answer.
    """
    try:
        if not twice_on_deadline(lambda: conn.model_ready(model)):
            return f"model '{model}' is not READY"
        check = twice_on_deadline(lambda: probe_for(conn, model))
        for _ in range(rounds if check else 0):
            twice_on_deadline(lambda: check(conn, model))
    except ServerUnreachable:
        raise
    except ClientError as exc:
        if is_overload(str(exc)):
            return None  # busy, not broken: Triton refused the probe for its queue limits
        return str(exc)
    return None


__all__ = ["dead_stub_models", "instance_model", "probe", "runs_in_stubs", "twice_on_deadline"]
