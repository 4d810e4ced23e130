"""What the repository index says about the models a health check does not serve: failed
loads (UNAVAILABLE with a reason) and loads still running (LOADING), for
:func:`tritonrepo_client.control.health.check_health`.

The index belongs to Triton's model-repository API, which needs the repository key; Triton
2.51 lists only the models of the server's repository folders (not models loaded by upload),
and may answer it only once a running load ends, so it is read with a deadline.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from tritonrepo_client.triton_messages import Kind, kinds_in

if TYPE_CHECKING:
    from tritonrepo_client.control.repository import ModelVersionState, RepositoryClient


def read_index(
    repository: RepositoryClient | None, timeout_s: float
) -> tuple[list[ModelVersionState] | None, str | None]:
    """The repository index, or (None, why not) when it cannot be read or does not answer
    within ``timeout_s`` seconds; (None, None) without a repository client.

    The read runs on a daemon thread: Triton 2.51 answers the index only once a running load
    ends (seen: an index call waited 26 s for a model whose initialize took 25 s), so a stuck
    load would hold the check forever; the thread is left to finish on its own.
    """
    if repository is None:
        return None, None
    result: list[Any] = []

    def read() -> None:
        try:
            result.append(repository.index())
        except Exception as exc:  # reported below; a thread's exception would only be logged
            result.append(exc)

    worker = threading.Thread(target=read, name="tritonrepo-health-index", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if not result:
        return None, (
            f"no answer within {timeout_s:g} s: Triton answers it only between loads, so a "
            f"model load has been running for {timeout_s:g} s or more (stuck LOADING?); "
            "`tritonrepo-client models list` names the model once its load ends"
        )
    if isinstance(result[0], Exception):
        return None, (f"not read, so models stuck LOADING or failed are not reported ({result[0]})")
    return result[0], None


def one_line(text: str, limit: int = 300) -> str:
    """``text`` (e.g. a Python traceback Triton gives as a reason) on one line, cut at
    ``limit`` characters."""
    text = " ".join(text.split("\nAt:")[0].split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def index_states(index: list[ModelVersionState] | None, model: str) -> str:
    """``repository index: version 1 LOADING; ...`` for ``model``, or "" when unknown."""
    rows = [r for r in index or [] if r.name == model and r.version]
    if not rows:
        return ""
    states = "; ".join(
        f"version {r.version} {r.state or 'unknown'}"
        + (f": {one_line(r.reason)}" if r.reason else "")
        for r in rows
    )
    return f"repository index: {states}"


def _benign(reason: str) -> bool:
    """Whether an UNAVAILABLE version's ``reason`` is not a failure (Triton's "unloaded":
    :data:`Kind.UNLOADED`)."""
    return Kind.UNLOADED in kinds_in(reason)


def repository_findings(
    before: list[ModelVersionState] | None,
    after: list[ModelVersionState] | None,
    error: str | None,
    served: set[str],
    elapsed_s: float,
) -> list[tuple[str, str]]:
    """``(name, detail)`` warnings about the models this deployment does not serve: one
    ``<model> state`` per model with a version LOADING at the start and at the end of the
    check, or UNAVAILABLE with a reason (a failed load); ``repository index`` when the index
    could not be read (``error``)."""
    if error is not None:
        return [("repository index", error)]
    if before is None or after is None:
        return []
    loading_before = {(r.name, r.version) for r in before if r.state == "LOADING"}
    found: dict[str, list[str]] = {}
    for row in after:
        if row.name in served or not row.version:
            continue
        if row.state == "LOADING" and (row.name, row.version) in loading_before:
            found.setdefault(row.name, []).append(
                f"version {row.version} LOADING throughout this check (at its start and "
                f"{elapsed_s:.2f} s later at its end): stuck if it stays LOADING"
            )
        elif row.state == "UNAVAILABLE" and row.reason and not _benign(row.reason):
            found.setdefault(row.name, []).append(
                f"version {row.version} UNAVAILABLE: {one_line(row.reason)}"
            )
    return [
        (f"{name} state", "; ".join(lines) + " (not served: the verdict ignores it)")
        for name, lines in sorted(found.items())
    ]
