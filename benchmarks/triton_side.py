"""The Triton side of a benchmark run: one server, config variants through the load API, and
per-step statistics.

Variants (an encoder version, dynamic batching off) are loaded the way an operator would change a
running deployment: a load-API config override (``RepositoryClient.load``), then the original
config is loaded back. Per-step statistics come from Triton's statistics extension
(``/v2/models/<m>/stats``): executed batch sizes and, per request, queue, compute-input, infer
and compute-output time.
"""

from __future__ import annotations

import contextlib
import copy
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tritonclient.http as httpclient

from benchmarks import perf_analyzer
from benchmarks.loadgen import Measurement
from tritonrepo.launcher import ServerOptions, TritonServer, free_port
from tritonrepo_client.repository import RepositoryClient

ConfigChange = Callable[[dict[str, Any]], dict[str, Any]]


def start_server(workdir: Path, models: tuple[str, ...]) -> TritonServer:
    """The embedded server (CPU configs, key-locked repository API) on free ports; use it as a
    context manager to start and stop it (:class:`tritonrepo.launcher.TritonServer`)."""
    options = ServerOptions(
        models=models,
        http_port=free_port(),
        grpc_port=free_port(),
        metrics_port=free_port(),
        log_file=workdir / "tritonserver.log",
        repository_key=secrets.token_urlsafe(16),
    )
    return TritonServer(options)


def serving(versions: list[int]) -> ConfigChange:
    """A config change that serves exactly ``versions`` (a version-policy override)."""

    def change(config: dict[str, Any]) -> dict[str, Any]:
        config["version_policy"] = {"specific": {"versions": versions}}
        return config

    return change


def without_dynamic_batching(config: dict[str, Any]) -> dict[str, Any]:
    """A config change that turns dynamic batching off: every request executes alone."""
    config.pop("dynamic_batching", None)
    return config


@contextlib.contextmanager
def variant(server: TritonServer, changes: dict[str, ConfigChange]) -> Iterator[None]:
    """Load each model of ``changes`` with its config changed, then load the original back.

    Raises:
        tritonrepo_client.ClientError: a load failed.
    """
    o = server.options
    with RepositoryClient(o.http_url, "http", key=o.repository_key or "") as repo:
        originals = {model: repo.config(model) for model in changes}
        try:
            for model, change in changes.items():
                repo.load(model, config=change(copy.deepcopy(originals[model])))
            yield
        finally:
            for model, config in originals.items():
                repo.load(model, config=config)


@dataclass(frozen=True)
class StepStats:
    """Cumulative statistics of one model: executions by batch size and, summed over requests,
    nanoseconds spent queued, gathering inputs, inferring and returning outputs."""

    batches: dict[int, int]
    requests: int
    queue_ns: int
    compute_input_ns: int
    compute_infer_ns: int
    compute_output_ns: int

    def since(self, before: StepStats) -> StepStats:
        """The difference to an earlier snapshot."""
        return StepStats(
            {b: n - before.batches.get(b, 0) for b, n in self.batches.items()},
            self.requests - before.requests,
            self.queue_ns - before.queue_ns,
            self.compute_input_ns - before.compute_input_ns,
            self.compute_infer_ns - before.compute_infer_ns,
            self.compute_output_ns - before.compute_output_ns,
        )

    @property
    def average_batch(self) -> float:
        """Mean executed batch size (0 when nothing ran)."""
        runs = sum(self.batches.values())
        return sum(b * n for b, n in self.batches.items()) / runs if runs else 0.0

    def per_request_ms(self) -> dict[str, float]:
        """Mean queue / compute-input / infer / compute-output time per request, in ms."""
        n = max(self.requests, 1)
        return {
            "queue": self.queue_ns / n / 1e6,
            "input": self.compute_input_ns / n / 1e6,
            "infer": self.compute_infer_ns / n / 1e6,
            "output": self.compute_output_ns / n / 1e6,
        }


def step_stats(server: TritonServer, model: str) -> StepStats:
    """A snapshot of ``model``'s statistics (all loaded versions summed)."""
    client = httpclient.InferenceServerClient(server.options.http_url)
    try:
        stats = client.get_inference_statistics(model)["model_stats"]
    finally:
        client.close()
    batches: dict[int, int] = {}
    sums = dict.fromkeys(
        ("success", "queue", "compute_input", "compute_infer", "compute_output"), 0
    )
    for version in stats:
        for b in version.get("batch_stats", []):
            size = int(b["batch_size"])
            batches[size] = batches.get(size, 0) + int(b["compute_infer"]["count"])
        for key in sums:
            entry = version["inference_stats"][key]
            sums[key] += int(entry["count"] if key == "success" else entry["ns"])
    return StepStats(
        batches,
        sums["success"],
        sums["queue"],
        sums["compute_input"],
        sums["compute_infer"],
        sums["compute_output"],
    )


def sweep(
    server: TritonServer,
    model: str,
    input_data: Path,
    levels: tuple[int, ...],
    window: perf_analyzer.Window,
    workdir: Path,
    watch: tuple[str, ...] = (),
    on_level: Callable[[], None] | None = None,
    batch_size: int = 1,
) -> tuple[list[Measurement], dict[int, dict[str, StepStats]], list[str]]:
    """perf_analyzer at each concurrency level, with statistics of the ``watch`` models
    (``batch_size``: see :func:`benchmarks.perf_analyzer.measure`).

    A level perf_analyzer cannot measure is left out and reported, so one unstable level does
    not lose a whole run.

    Returns:
        The measurements, per level ``{model: StepStats during that level}``, and one line per
        level that failed.
    """
    measurements, stats, failures = [], {}, []
    for level in levels:
        before = {m: step_stats(server, m) for m in watch}
        report = workdir / f"{model}_c{level}.csv"
        try:
            measurements.append(
                perf_analyzer.measure(
                    model, server.options.grpc_url, input_data, level, report, window,
                    batch_size=batch_size,
                )
            )  # fmt: skip
        except RuntimeError as exc:
            failures.append(f"c{level}: {' '.join(str(exc).split())[:300]}")
        stats[level] = {m: step_stats(server, m).since(before[m]) for m in watch}
        if on_level:
            on_level()
    return measurements, stats, failures


def profile(stats: dict[int, dict], level: int) -> dict[str, float]:
    """Per-step ms per request at ``level`` (queue and infer), for the report's profile."""
    out = {}
    for model, step in stats.get(level, {}).items():
        for what, ms in step.per_request_ms().items():
            out[f"{model}.{what}_ms"] = round(ms, 3)
    return out
