"""Liveness and readiness checks that mean something: a real inference on each served model.

Liveness is the server answering (``GET /v2/health/live``). Readiness is "can serve": each
model this deployment serves is READY and answers a probe inference whose output is checked:
the probe the model declares in its config (:mod:`tritonrepo_client.control.probe_declaration`;
a described pipeline's comes from its description); a model without one is reported "ready,
not probed", never "answering". With a repository client, models that are not served but stuck
LOADING or failed to load are reported as warnings.
Triton's own server readiness (``GET /v2/health/ready``) is not used: with
``--strict-readiness=true`` (Triton's default, the container's) any unrelated model that fails
to load turns it false, and a model can be READY while it cannot serve (a stub that died).
Used by ``tritonrepo-client health`` (exit status for container health checks), by the
launcher before it reports "ready", and by :mod:`tritonrepo_client.control.healing.healer`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tritonrepo_client.connection import ClientError, TritonConnection
from tritonrepo_client.control.health_index import index_states, read_index, repository_findings
from tritonrepo_client.control.model_calls import CALLS_PARAMETER, load_closure, server_configs
from tritonrepo_client.control.probe_declaration import PROBE_PARAMETER, declared_probe
from tritonrepo_client.triton_messages import CATALOGUE, Kind, kinds_in

if TYPE_CHECKING:
    from tritonrepo_client.control.repository import ModelVersionState, RepositoryClient

# Seconds a health check waits for the repository index (Triton holds it during a load).
INDEX_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Check:
    """One check's outcome; ``detail`` says what was seen. ``warning``: a finding that does
    not fail the verdict (``ok`` stays True), e.g. a model that is not served stuck LOADING."""

    name: str
    ok: bool
    detail: str
    warning: bool = False


NOT_PROBED = (
    "ready, not probed: it declares no probe (config parameter "
    f"{PROBE_PARAMETER}: docs/operations/health.md), so no inference was sent"
)


def probe_for(conn: TritonConnection, model: str) -> Callable[[TritonConnection, str], str] | None:
    """The probe of ``model``: the one its config declares (parameter ``tritonrepo_probe``,
    read through the model-config endpoint), else None.

    Raises:
        InvalidProbe: the declared probe is malformed.
        ClientError: the config cannot be read.
    """
    return declared_probe(conn.model_config(model), model)


def check_health(
    conn: TritonConnection,
    models: Sequence[str],
    live_only: bool = False,
    repository: RepositoryClient | None = None,
    index_timeout_s: float = INDEX_TIMEOUT_S,
) -> list[Check]:
    """Liveness, then every model's readiness and probe inference; one failing model does not
    stop the checks of the others.

    Args:
        conn: connection to the server.
        models: the models this deployment serves: each is checked for READY and, where it has
            a probe (:func:`probe_for`), with a probe inference; one without is reported
            "ready, not probed".
        live_only: only the liveness check (the process answers).
        repository: a client of the model-repository API (with the key); when given, the
            repository index is read before and after the model checks, and every other model
            stuck LOADING (in both reads) or UNAVAILABLE with a reason other than "unloaded"
            gets a warning (``Check.warning``; it does not fail the verdict), and a served
            model that is not READY gets its index state in its detail. Triton answers the
            index only between loads (a load through the load API holds it), so an index that
            does not answer within ``index_timeout_s`` seconds is reported as a load running
            at least that long (a model stuck LOADING), also as a warning.
        index_timeout_s: seconds to wait for each index read.

    Returns:
        ``live``, then ``ready`` (all models serve; Triton's server readiness is only mentioned
        when it disagrees), then ``<model> ready`` and ``<model> inference`` per model (no
        inference check for a model without a probe), then ``<model> state`` warnings; all
        ``ok`` means healthy. Only ``live`` when the server is not live.
    """
    live = _run("live", lambda: _state(conn.server_live(), "server", "live"))
    if not live.ok or live_only:
        return [live]
    started = time.monotonic()
    before, index_error = read_index(repository, index_timeout_s)
    per_model = [check for model in models for check in _model_checks(conn, model, before)]
    after, later_error = (
        read_index(repository, index_timeout_s) if before is not None else (None, None)
    )
    findings = [
        Check(name, True, detail, warning=True)
        for name, detail in repository_findings(
            before, after, index_error or later_error, set(models), time.monotonic() - started
        )
    ]
    return [live, _summary(conn, models, per_model), *per_model, *findings]


def _run(name: str, fn: Callable[[], tuple[bool, str]]) -> Check:
    """One check; ``fn`` returns (ok, detail), a ClientError fails it; ok details get the time
    taken in ms."""
    start = time.perf_counter()
    try:
        ok, detail = fn()
    except ClientError as exc:
        ok, detail = False, str(exc)
    ms = (time.perf_counter() - start) * 1e3
    return Check(name, ok, f"{detail} ({ms:.1f} ms)" if ok else detail)


def _state(value: bool, subject: str, what: str) -> tuple[bool, str]:
    return value, f"{subject} is {what}" if value else f"{subject} is not {what}"


# Triton's queue-policy refusals: the model serves, its queue is full or too slow for the probe's
# timeout. Readiness must not fail on them: taking a busy server out of rotation moves its load
# onto the others, which then fail too (a cascade).
OVERLOAD_KINDS = frozenset({Kind.QUEUE_FULL, Kind.QUEUE_TIMEOUT})
# The texts of those refusals (:mod:`tritonrepo_client.triton_messages`): "Exceeds maximum queue
# size", "Request timeout expired".
OVERLOAD_MARKERS = tuple(m.pattern.pattern for m in CATALOGUE if m.kind in OVERLOAD_KINDS)


def is_overload(error: str) -> bool:
    """Whether ``error`` is Triton refusing work it cannot queue (full queue, queue timeout:
    :data:`OVERLOAD_KINDS`)."""
    return bool(kinds_in(error) & OVERLOAD_KINDS)


def _model_checks(
    conn: TritonConnection, model: str, index: list[ModelVersionState] | None
) -> list[Check]:
    """``<model> ready``, then ``<model> calls`` (failed) when a model it calls through BLS is
    not READY, else ``<model> inference`` when it is READY and has a probe. A probe
    that Triton refuses for overload (:func:`is_overload`) passes as ``busy``; a model without
    a probe passes ``ready`` with the words "ready, not probed"."""
    ready = _run(f"{model} ready", lambda: _state(conn.model_ready(model), "model", "READY"))
    if not ready.ok:
        states = index_states(index, model)
        return [Check(ready.name, False, f"{ready.detail} ({states})" if states else ready.detail)]
    calls = _calls_check(conn, model, index)
    if calls is not None:
        return [ready, calls]
    try:
        probe = probe_for(conn, model)
    except ClientError as exc:
        return [ready, Check(f"{model} inference", False, f"no probe sent: {exc}")]
    if probe is None:
        return [Check(ready.name, True, f"{ready.detail}; {NOT_PROBED}")]

    def infer() -> tuple[bool, str]:
        try:
            return True, probe(conn, model)
        except ClientError as exc:
            if is_overload(str(exc)):
                return True, f"busy, serving (the probe was refused for overload: {exc})"
            raise

    return [ready, _run(f"{model} inference", infer)]


def _calls_check(
    conn: TritonConnection, model: str, index: list[ModelVersionState] | None
) -> Check | None:
    """``<model> calls``, failed, when a model that ``model`` calls through BLS (declared in its
    config: :mod:`tritonrepo_client.control.model_calls`) is not READY: its requests would fail
    with "Model '...' is not ready", so no probe is sent. None when every called model is READY
    (or it declares none)."""
    try:
        called = load_closure([model], server_configs(conn.model_config))
        missing = [m for m in called if not conn.model_ready(m)]
    except ClientError as exc:
        return Check(f"{model} calls", False, f"cannot check the models it calls: {exc}")
    if not missing:
        return None
    states = "; ".join(f"{m}: {s}" for m in missing if (s := index_states(index, m)))
    return Check(
        f"{model} calls",
        False,
        f"{model} calls {', '.join(missing)} through BLS (its config's {CALLS_PARAMETER}), "
        f"which {'is' if len(missing) == 1 else 'are'} not READY"
        + (f" ({states})" if states else "")
        + f"; load {'it' if len(missing) == 1 else 'them'}: tritonrepo-client models load "
        + " ".join(missing),
    )


def _summary(conn: TritonConnection, models: Sequence[str], checks: list[Check]) -> Check:
    """``ready``: every served model passed its checks; says how many answered a probe."""
    failing = list(dict.fromkeys(c.name.rsplit(" ", 1)[0] for c in checks if not c.ok))
    if failing:
        return Check("ready", False, f"cannot serve: {', '.join(failing)}")
    probed = {c.name.rsplit(" ", 1)[0] for c in checks if c.name.endswith(" inference")}
    unprobed = [m for m in models if m not in probed]
    if not unprobed:
        detail = f"all {len(models)} served models READY and answering"
    elif not probed:
        detail = (
            f"all {len(models)} served models READY, not probed ({', '.join(unprobed)}): "
            "no inference was sent"
        )
    else:
        detail = (
            f"all {len(models)} served models READY; {len(probed)} answering a probe, "
            f"{len(unprobed)} ready, not probed ({', '.join(unprobed)})"
        )
    try:
        if not conn.server_ready():
            detail += " (Triton's /v2/health/ready says not ready: another model failed; ignored)"
    except ClientError:
        pass
    return Check("ready", True, detail)
