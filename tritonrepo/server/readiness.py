"""When a freshly started ``tritonserver`` counts as ready, and one-line reasons when it does not.

Used by :class:`tritonrepo.server.launcher.TritonServer` at start and after each restart: the
process answers ``/v2/health/live``, every model of the start list is READY in the repository index
(a failing one is named with Triton's reason, its failing step first), and each answers a real probe
inference (:mod:`tritonrepo_client.control.health`). Triton's own server readiness is not used: it
runs with ``--strict-readiness=false`` (a strict server turns not-ready when any unrelated model
fails to load).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tritonrepo.server.embedded_server import LaunchError


def one_line(text: str, limit: int = 400) -> str:
    """Condense a Triton error (often a multi-line Python traceback) to one line.

    Keeps what precedes the stub's ``At:`` traceback marker, collapses whitespace, and cuts at
    ``limit`` characters.
    """
    text = text.split("\n\nAt:")[0].split("\nAt:\n")[0]
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def load_failures(index: list[dict], models: Sequence[str], log_file: Path) -> str:
    """One line naming the ``models`` that are not READY in the repository ``index`` (Triton's
    JSON entries), composing models first; "" when all are READY."""
    states = {entry["name"]: entry for entry in index}
    failed = [name for name in models if states.get(name, {}).get("state") != "READY"]
    if not failed:
        return ""
    # A failing step makes its ensemble fail too; name the step, whose reason is the cause.
    steps = [e for e in index if e.get("state") == "UNAVAILABLE" and e["name"] not in failed]
    culprit = steps[0] if steps else states.get(failed[0], {"name": failed[0]})
    reason = one_line(culprit.get("reason") or "unknown reason (see the server log)")
    return (
        f"model '{culprit['name']}' failed to load, so {', '.join(failed)} cannot serve: "
        f"{reason} (log: {log_file})"
    )


def exit_reason(code: int | None, log_file: Path, offset: int = 0) -> str:
    """Why a process that exited with ``code`` during startup failed: the last error line of
    its log (read from byte ``offset``: where this process's output starts)."""
    tail = ""
    with contextlib.suppress(OSError), open(log_file, "rb") as log:
        log.seek(offset)
        lines = log.read().decode(errors="replace").splitlines()
        errors = [ln for ln in lines if ln.startswith("E") or "error" in ln.lower()]
        tail = one_line((errors or lines or [""])[-1], limit=300)
    return f"tritonserver exited with code {code} during startup: {tail} (log: {log_file})"


def wait_ready(
    url: str,
    options: Any,
    check_running: Callable[[], None],
    check_health: Callable[[], list],
) -> None:
    """Wait until the server at ``url`` (``host:port`` of tritonserver's HTTP endpoint) is live
    and every model of ``options.load_models`` (the served models and those they call through
    BLS) READY, within ``options.startup_timeout_s`` seconds;
    then run ``check_health`` (the probe inferences).

    Args:
        check_running: raises :class:`LaunchError` when the process exited or is being stopped.
        check_health: ``tritonrepo_client.control.health.Check`` list of the probes.

    Raises:
        LaunchError: see :meth:`tritonrepo.server.launcher.TritonServer.start`.
    """
    import tritonclient.http as httpclient

    o = options
    deadline = time.monotonic() + o.startup_timeout_s
    client = httpclient.InferenceServerClient(url, connection_timeout=5.0)
    try:
        while True:
            check_running()
            with contextlib.suppress(Exception):
                if client.is_server_live():
                    break
            if time.monotonic() > deadline:
                raise LaunchError(
                    f"tritonserver was not live within {o.startup_timeout_s:.0f} s; "
                    f"see {o.log_file}"
                )
            time.sleep(0.2)
        # Models listed with --load-model are loaded before the endpoints open, so the
        # repository index now holds their final state.
        index = client.get_model_repository_index(headers=o.repository_headers)
        failures = load_failures(index, o.load_models, o.log_file)
        if failures:
            raise LaunchError(failures)
        while True:
            check_running()
            waiting = [m for m in o.load_models if not client.is_model_ready(m)]
            if not waiting:
                break
            if time.monotonic() > deadline:
                raise LaunchError(
                    f"{', '.join(waiting)} not READY within {o.startup_timeout_s:.0f} s; "
                    f"see {o.log_file}"
                )
            time.sleep(0.2)
    finally:
        client.close()  # an idle connection would hold up Triton's stop
    # The first failing model's own checks, not the "ready" summary naming them all.
    unhealthy = [c for c in check_health() if not c.ok and c.name != "ready"]
    if unhealthy:
        raise LaunchError(
            f"{unhealthy[0].name} failed: {one_line(unhealthy[0].detail)} (log: {o.log_file})"
        )


def ready_models(url: str, headers: dict[str, str]) -> list[str]:
    """Models with a READY version at ``url`` (``host:port``), from the repository index read
    with ``headers`` (the repository key).

    Raises:
        tritonclient.utils.InferenceServerException: the index cannot be read.
    """
    import tritonclient.http as httpclient

    client = httpclient.InferenceServerClient(url, connection_timeout=5.0, network_timeout=30.0)
    try:
        index = client.get_model_repository_index(headers=headers)
    finally:
        client.close()  # at once: an idle connection would hold up Triton's stop
    return [e["name"] for e in index if e.get("state") == "READY"]


__all__ = ["exit_reason", "load_failures", "one_line", "ready_models", "wait_ready"]
