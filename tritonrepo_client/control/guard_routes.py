"""The HTTP guard's routes API (``deploy/guard/routes.js``): which share of a model's inference
requests goes to a canary model, which share is copied to it and compared, and the decisions of
a canary rollout.

The guard answers under ``/_guard/`` on the server's HTTP port; changes need the repository key
(the ``x-model-repository-key`` header), reads do not.
"""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass
from typing import Any

from tritonrepo_client.connection import ClientError


class GuardRoutesError(ClientError):
    """The guard refused a routes call or is not there (the message says which)."""


@dataclass(frozen=True)
class Route:
    """One model's route: ``canary`` (the model that answers the canary share), ``weight``
    (percent of requests it answers, 0 to 50), ``shadow`` (percent copied to it and compared),
    ``agreement`` (what the shadow copies compare: a list of ``{"output", "measure"[,
    "threshold"]}``, measures ``exact``, ``argmax``, ``decision``, ``cosine``, ``overlap``,
    ``abs_diff``; or None)."""

    canary: str
    weight: float
    shadow: float
    agreement: list[dict[str, Any]] | dict[str, Any] | None = None


class GuardRoutes:
    """Calls the routes API of the guard at ``url`` (``host:port``, the server's HTTP port).

    Args:
        url: the guard's ``host:port``.
        headers: the repository key header (:func:`tritonrepo_client.control.repository_key.
            headers`), for changes.
        timeout_s: per call, seconds.
    """

    def __init__(self, url: str, headers: dict[str, str], timeout_s: float = 30.0) -> None:
        host, _, port = url.rpartition(":")
        self.host, self.port = host or "127.0.0.1", int(port)
        self.headers = dict(headers)
        self.timeout_s = timeout_s

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        """The JSON answer of one call.

        Raises:
            GuardRoutesError: not answered, not JSON, or an error status (its message).
        """
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
        data = None if body is None else json.dumps(body).encode()
        headers = {**self.headers, "Content-Type": "application/json"}
        try:
            conn.request(method, path, body=data, headers=headers)
            response = conn.getresponse()
            raw = response.read()
        except OSError as exc:
            raise GuardRoutesError(
                f"{method} {path}: the guard did not answer ({exc}); "
                "is the server running behind its HTTP guard?"
            ) from exc
        finally:
            conn.close()
        try:
            value = json.loads(raw) if raw else None
        except ValueError:
            value = None
        if response.status != 200:
            detail = value.get("error") if isinstance(value, dict) else raw[:200].decode("replace")
            if response.status == 404:
                detail = "no routes API here: the server runs without the HTTP guard"
            raise GuardRoutesError(f"{method} {path}: {response.status}: {detail}")
        return value

    def metrics_port(self) -> int | None:
        """The port of Triton's metrics endpoint on the guard's host, as the guard was told it
        (``GET /_guard/upstream``), or None when it was not.

        Raises:
            GuardRoutesError: the guard does not answer, or has no such path (an older one).
        """
        value = self._call("GET", "/_guard/upstream")
        port = value.get("metrics_port") if isinstance(value, dict) else None
        return port if isinstance(port, int) and port > 0 else None

    def routes(self) -> dict[str, Route]:
        """Every route, by model."""
        return {m: Route(**v) for m, v in (self._call("GET", "/_guard/routes") or {}).items()}

    def set(self, model: str, route: Route) -> None:
        """Route ``model``'s requests as ``route`` says (replacing any route it had)."""
        body = {
            "canary": route.canary,
            "weight": route.weight,
            "shadow": route.shadow,
            "agreement": route.agreement,
        }
        self._call("PUT", f"/_guard/routes/{model}", body)

    def remove(self, model: str) -> Route | None:
        """Send all of ``model``'s requests to it again; returns the route it had (None: it
        had none)."""
        had = self._call("DELETE", f"/_guard/routes/{model}")
        return Route(**had) if had else None

    def decide(self, model: str, canary: str, decision: str, weight: float, reason: str) -> None:
        """Record a decision (``start``, ``step``, ``promote``, ``rollback``, ``report``): the
        guard logs it and counts it in ``tritonrepo_canary_decisions_total``."""
        body = {"decision": decision, "canary": canary, "weight": weight, "reason": reason}
        self._call("POST", f"/_guard/decisions/{model}", body)

    def decisions(self, model: str) -> list[dict[str, Any]]:
        """The decisions recorded for ``model``, oldest first: ``t`` (epoch seconds), ``model``,
        ``canary``, ``decision``, ``weight`` (percent) and ``reason``."""
        return self._call("GET", f"/_guard/decisions/{model}")

    def shadow(self, model: str, since: float = 0.0) -> dict[str, Any]:
        """The shadow comparison of ``model`` with its canary since ``since`` (epoch seconds):
        ``compared``, ``stable_failed``, ``canary_failed``, ``*_p50_ms``, ``*_p90_ms``,
        ``*_p95_ms``, ``*_p99_ms``, and ``measures``: for each ``<output>:<measure>``, the
        distribution of its per-row scores (``rows``, ``mean``, ``min``, ``max``, ``p01`` to
        ``p99``)."""
        return self._call("GET", f"/_guard/shadow/{model}?since={since:.3f}")

    def clear_shadow(self, model: str) -> None:
        """Forget the comparisons of ``model``."""
        self._call("DELETE", f"/_guard/shadow/{model}")
