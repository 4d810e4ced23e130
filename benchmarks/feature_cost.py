"""What counting input features costs (drift monitoring, ``tritonrepo.step.drift``), read from
the benchmark server's own metrics after the runs: per monitored pipeline, the time its entry
step spent computing and counting features per request it answered, next to the pipeline's
mean request duration as Triton measured it (``nv_inference_request_duration_us`` over
``nv_inference_request_success``, the ensemble's, all levels of the run together)."""

from __future__ import annotations

from collections import defaultdict

from tritonrepo.server.launcher import TritonServer
from tritonrepo_client.control.live_metrics import samples

SECONDS = "tritonrepo_feature_seconds"


def feature_costs(server: TritonServer) -> list[dict[str, float | str]]:
    """Per monitored pipeline: ``pipeline``, ``requests`` (answered by its entry step),
    ``features_us`` (feature time per request, µs) and ``request_us`` (the pipeline's mean
    request duration, µs; 0 when the pipeline model has no success)."""
    seconds: dict[str, float] = defaultdict(float)
    entry: dict[str, str] = {}
    success: dict[str, float] = defaultdict(float)
    duration: dict[str, float] = defaultdict(float)
    o = server.options
    for name, labels, value in samples(f"{o.client_host}:{o.metrics_port}", 30.0):
        if name == SECONDS:
            seconds[labels["pipeline"]] += value
            entry[labels["pipeline"]] = labels["model"]
        elif name == "nv_inference_request_success":
            success[labels["model"]] += value
        elif name == "nv_inference_request_duration_us":
            duration[labels["model"]] += value
    rows: list[dict[str, float | str]] = []
    for pipeline, spent in sorted(seconds.items()):
        requests = success[entry[pipeline]]
        if not requests:
            continue
        served = success[pipeline]
        rows.append({
            "pipeline": pipeline,
            "requests": requests,
            "features_us": spent / requests * 1e6,
            "request_us": duration[pipeline] / served if served else 0.0,
        })  # fmt: skip
    return rows


def report_lines(rows: list[dict[str, float | str]]) -> list[str]:
    """The report's section (empty without rows)."""
    if not rows:
        return []
    lines = [
        "## Input features (drift monitoring)",
        "",
        "Time the entry step spent computing and counting a request's input features "
        "(`tritonrepo_feature_seconds_total`), per request it answered over the whole run, "
        "against the pipeline's mean request duration (Triton's, all levels):",
        "",
        "| pipeline | requests | features per request | mean request | share |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        share = f"{100 * float(r['features_us']) / float(r['request_us']):.1f} %" if r[
            "request_us"] else "–"  # fmt: skip
        lines.append(
            f"| {r['pipeline']} | {int(float(r['requests'])):,} | {float(r['features_us']):.0f} µs"
            f" | {float(r['request_us']):.0f} µs | {share} |"
        )
    return [*lines, ""]
