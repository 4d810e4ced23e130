"""Live traffic as a health signal: how many requests each model answered and failed, read from
Triton's statistics endpoint (``GET /v2/models/stats``, open without the repository key).

A served model whose successes grew since the healer's last look, and whose failures did not,
has just proven that it serves: probing it too would cost an inference for nothing. The healer
(:class:`tritonrepo_client.control.healing.healer.Healer`) probes the others.
"""

from __future__ import annotations

from dataclasses import dataclass

from tritonrepo_client.connection import TritonConnection


@dataclass(frozen=True)
class Counts:
    """Requests of one model since it was loaded, all versions together: ``success`` and
    ``fail`` (Triton's ``inference_stats``: a request refused or failed by the model counts as
    a failure, a bad request included)."""

    success: int = 0
    fail: int = 0

    def vouches_since(self, before: Counts) -> bool:
        """Whether requests were answered since ``before`` and none failed."""
        return self.success > before.success and self.fail <= before.fail


def inference_counts(conn: TritonConnection) -> dict[str, Counts]:
    """Model -> :class:`Counts`, for every model Triton has statistics of.

    Raises:
        ClientError: the statistics cannot be read (e.g. the server does not answer).
    """
    if conn.protocol == "http":
        stats = conn.call("statistics", lambda: conn.client.get_inference_statistics())
    else:
        stats = conn.call("statistics", lambda: conn.client.get_inference_statistics(as_json=True))
    totals: dict[str, list[int]] = {}
    for entry in stats.get("model_stats", []):
        inference = entry.get("inference_stats", {})
        total = totals.setdefault(entry["name"], [0, 0])
        total[0] += int(inference.get("success", {}).get("count", 0))
        total[1] += int(inference.get("fail", {}).get("count", 0))
    return {name: Counts(*counts) for name, counts in totals.items()}
