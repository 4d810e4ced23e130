"""How long and how hard one benchmark run measures (full or ``--quick``), and its progress."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.harness.perf_analyzer import Window

FULL_LEVELS = (1, 2, 4, 8, 16, 32)
QUICK_LEVELS = (1, 8)
# What differs between a full run and --quick (CI: a few seconds per system).
FULL = {
    "levels": FULL_LEVELS,
    "window": Window(interval_ms=3000, stability_percent=25, max_trials=6),
    "loadgen_s": 9.0,
    "texts": 512,
    "ranking_requests": 125,
    "sessions": 64,
    "images": 64,
}
QUICK = {
    "levels": QUICK_LEVELS,
    # windows of 30 answers: as quick as 1 s windows where answers are fast, and never empty
    # where a loaded image system answers slowly on a busy 2-core machine
    "window": Window(interval_ms=1000, stability_percent=999, max_trials=3, request_count=30),
    "loadgen_s": 1.5,
    "texts": 64,
    "ranking_requests": 32,
    "sessions": 16,
    "images": 16,
}


@dataclass(frozen=True)
class Settings:
    """One run's knobs.

    Attributes:
        quick: CI mode: a few seconds per system, proves the harness works, asserts no speed.
        levels: concurrency levels of every served system.
        window: perf_analyzer's measurement window.
        loadgen_s: seconds the Python load generator measures per level at least (after 1 s
            warm-up; longer until the window holds an answer).
        texts: number of real texts (every text system gets the same ones).
        ranking_requests: ctr_ranking requests (users).
        sessions: ctr_session sessions.
        images: real photographs (JPEG) of the image_classification systems.
        workdir: where logs, CSVs and perf_analyzer inputs go.
        progress: called with a short description after each measurement.
    """

    quick: bool
    levels: tuple[int, ...]
    window: Window
    loadgen_s: float
    texts: int
    ranking_requests: int
    sessions: int
    images: int
    workdir: Path
    progress: Callable[[str], None] = lambda _description: None

    @classmethod
    def make(cls, quick: bool, workdir: Path, levels: tuple[int, ...] | None = None) -> Settings:
        """Full settings (a sweep of ~1 minute per served system) or quick ones."""
        knobs = dict(QUICK if quick else FULL)
        if levels:
            knobs["levels"] = levels
        return cls(quick=quick, workdir=workdir, **knobs)  # type: ignore[arg-type]
