"""What counting input features costs (drift monitoring, ``tritonrepo.step.drift``), read from
the benchmark server's own metrics after the runs: per monitored pipeline, the time its entry
step spent computing and counting features per request it answered, next to the pipeline's
mean request duration as Triton measured it (``nv_inference_request_duration_us`` over
``nv_inference_request_success``, the ensemble's, all levels of the run together)."""

from __future__ import annotations

from collections import defaultdict

from benchmarks.harness.results import System
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


def alone_p50_ms(systems: list[System], pipeline: str) -> float | None:
    """p50 at concurrency 1 (ms) of the run's first Triton system serving ``pipeline``: what
    one request costs without queueing."""
    for system in systems:
        alone = system.at(1) if system.workload == pipeline else None
        if alone is not None and system.key.startswith("triton_"):
            return alone.p50_ms
    return None


def report_lines(rows: list[dict[str, float | str]], systems: list[System]) -> list[str]:
    """The report's section (empty without rows): the features' time per request against the
    pipeline's p50 at concurrency 1 in the same run (the mean request duration, all levels,
    is mostly queueing at the high levels)."""
    if not rows:
        return []
    lines = [
        "## Input features (drift monitoring)",
        "",
        "Time the entry step spent computing and counting a request's input features "
        "(`tritonrepo_feature_seconds_total`), per request it answered over the whole run "
        "(every level, so under load), against the pipeline's p50 at concurrency 1 in this run "
        "and its mean request duration (Triton's, all levels):",
        "",
        "| pipeline | requests | features per request | c=1 p50 | share of it | mean request |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        features_us = float(r["features_us"])
        alone = alone_p50_ms(systems, str(r["pipeline"]))
        share = f"{features_us / (10 * alone):.1f} %" if alone else "–"
        alone_text = f"{alone:.1f} ms" if alone else "–"
        lines.append(
            f"| {r['pipeline']} | {int(float(r['requests'])):,} | {features_us:.0f} µs"
            f" | {alone_text} | {share} | {float(r['request_us']) / 1000:.1f} ms |"
        )
    return [*lines, ""]
