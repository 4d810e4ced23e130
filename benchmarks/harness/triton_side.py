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
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tritonclient.http as httpclient

from benchmarks.harness import perf_analyzer
from benchmarks.harness.loadgen import Measurement
from tritonrepo.server.launcher import ServerOptions, TritonServer, free_port
from tritonrepo_client.control.repository import RepositoryClient

ConfigChange = Callable[[dict[str, Any]], dict[str, Any]]


def start_server(workdir: Path, models: tuple[str, ...]) -> TritonServer:
    """The embedded server (CPU configs, key-locked repository API) on free ports; use it as a
    context manager to start and stop it (:class:`tritonrepo.server.launcher.TritonServer`)."""
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
    """Cumulative statistics of one model (all versions summed), or their change over a window.

    Attributes:
        batches: ``{batch size: executions}`` from ``batch_stats``.
        requests: successful requests (``inference_stats.success.count``).
        queue_ns: nanoseconds requests spent queued, summed over requests.
        compute_input_ns: ns gathering inputs, summed over requests.
        compute_infer_ns: ns executing, summed over requests (a batched execution counts once
            for each request in it, so this is latency per request, not cost per execution).
        compute_output_ns: ns returning outputs, summed over requests.
        inferences: ``inference_count``: batch items inferred (requests x their batch size).
        executions: ``execution_count``: model executions (one per dynamic batch).
    """

    batches: dict[int, int]
    requests: int
    queue_ns: int
    compute_input_ns: int
    compute_infer_ns: int
    compute_output_ns: int
    inferences: int = 0
    executions: int = 0

    def since(self, before: StepStats) -> StepStats:
        """The difference to an earlier snapshot."""
        return StepStats(
            {b: n - before.batches.get(b, 0) for b, n in self.batches.items()},
            self.requests - before.requests,
            self.queue_ns - before.queue_ns,
            self.compute_input_ns - before.compute_input_ns,
            self.compute_infer_ns - before.compute_infer_ns,
            self.compute_output_ns - before.compute_output_ns,
            self.inferences - before.inferences,
            self.executions - before.executions,
        )

    @property
    def average_batch(self) -> float:
        """Mean executed batch size, ``inference_count / execution_count`` (from the batch
        sizes where those counts are absent; 0 when nothing ran)."""
        if self.executions:
            return self.inferences / self.executions
        runs = sum(self.batches.values())
        return sum(b * n for b, n in self.batches.items()) / runs if runs else 0.0

    def per_request_ms(self) -> dict[str, float]:
        """Mean queue / compute-input / infer / compute-output time per request, in ms
        (Triton's ns sums divided by the request count; zeros when nothing ran)."""
        n = max(self.requests, 1)
        return {
            "queue": self.queue_ns / n / 1e6,
            "input": self.compute_input_ns / n / 1e6,
            "infer": self.compute_infer_ns / n / 1e6,
            "output": self.compute_output_ns / n / 1e6,
        }

    def compute_ms(self) -> float:
        """Mean compute time per request (input + infer + output), in ms."""
        ms = self.per_request_ms()
        return ms["input"] + ms["infer"] + ms["output"]


def parse_stats(model_stats: list[dict[str, Any]]) -> StepStats:
    """A :class:`StepStats` from the ``model_stats`` list of one model's
    ``/v2/models/<m>/stats`` answer (one entry per loaded version; summed).

    Raises:
        KeyError: an entry lacks ``inference_stats`` or one of its fields.
    """
    batches: dict[int, int] = {}
    sums = dict.fromkeys(
        ("success", "queue", "compute_input", "compute_infer", "compute_output"), 0
    )
    inferences = executions = 0
    for version in model_stats:
        for b in version.get("batch_stats", []):
            size = int(b["batch_size"])
            batches[size] = batches.get(size, 0) + int(b["compute_infer"]["count"])
        for key in sums:
            entry = version["inference_stats"][key]
            sums[key] += int(entry["count"] if key == "success" else entry["ns"])
        inferences += int(version.get("inference_count", 0))
        executions += int(version.get("execution_count", 0))
    return StepStats(
        batches,
        sums["success"],
        sums["queue"],
        sums["compute_input"],
        sums["compute_infer"],
        sums["compute_output"],
        inferences,
        executions,
    )


def raw_stats(server: TritonServer, model: str) -> list[dict[str, Any]]:
    """The ``model_stats`` list of ``/v2/models/<model>/stats`` (HTTP)."""
    client = httpclient.InferenceServerClient(server.options.http_url)
    try:
        return client.get_inference_statistics(model)["model_stats"]
    finally:
        client.close()


def step_stats(server: TritonServer, model: str) -> StepStats:
    """A snapshot of ``model``'s statistics (all loaded versions summed)."""
    return parse_stats(raw_stats(server, model))


@dataclass(frozen=True)
class LevelSteps:
    """One concurrency level of a sweep.

    Attributes:
        concurrency: requests in flight.
        steps: ``{model: StepStats}``, the change between snapshots taken right before and
            right after perf_analyzer ran (its warm-up and every window included).
        wall_s: seconds between those snapshots (executions/s = executions / wall_s).
        level: perf_analyzer's result; None when the level failed.
    """

    concurrency: int
    steps: dict[str, StepStats]
    wall_s: float
    level: perf_analyzer.Level | None


@dataclass
class Sweep:
    """Every level of one sweep, and one line per level that failed."""

    levels: list[LevelSteps] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def measurements(self) -> list[Measurement]:
        """The levels perf_analyzer measured."""
        return [lv.level.measurement for lv in self.levels if lv.level]

    def stats(self) -> dict[int, dict[str, StepStats]]:
        """``{concurrency: {model: StepStats}}`` (the per-level step statistics)."""
        return {lv.concurrency: lv.steps for lv in self.levels}


def sweep_steps(
    server: TritonServer,
    model: str,
    input_data: Path,
    levels: tuple[int, ...],
    window: perf_analyzer.Window,
    workdir: Path,
    watch: tuple[str, ...] = (),
    on_level: Callable[[], None] | None = None,
    batch_size: int = 1,
    client_threads: int | None = perf_analyzer.CLIENT_THREADS,
    pin: tuple[int, ...] | str = perf_analyzer.AUTO,
) -> Sweep:
    """perf_analyzer at each concurrency level, with statistics of the ``watch`` models, the
    wall time between the snapshots and perf_analyzer's own CPU use (``batch_size``,
    ``client_threads``, ``pin``: see :func:`benchmarks.harness.perf_analyzer.run_level`).

    A level perf_analyzer cannot measure is kept with ``level=None`` and reported in
    ``failures``, so one unstable level does not lose a whole run.
    """
    result = Sweep()
    for level in levels:
        before = {m: step_stats(server, m) for m in watch}
        started = time.monotonic()
        report = workdir / f"{model}_c{level}.csv"
        measured = None
        try:
            measured = perf_analyzer.run_level(
                model, server.options.grpc_url, input_data, level, report, window,
                batch_size=batch_size, client_threads=client_threads, pin=pin,
            )  # fmt: skip
        except RuntimeError as exc:
            result.failures.append(f"c{level}: {' '.join(str(exc).split())[:300]}")
        after = {m: step_stats(server, m) for m in watch}
        wall = time.monotonic() - started
        steps = {m: after[m].since(before[m]) for m in watch}
        result.levels.append(LevelSteps(level, steps, wall, measured))
        if on_level:
            on_level()
    return result


def profile(stats: dict[int, dict], level: int) -> dict[str, float]:
    """Per-step ms per request at ``level`` (queue and infer), for the report's profile."""
    out = {}
    for model, step in stats.get(level, {}).items():
        for what, ms in step.per_request_ms().items():
            out[f"{model}.{what}_ms"] = round(ms, 3)
    return out
