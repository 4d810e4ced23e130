"""What one benchmark run measured: systems, their load levels, and the run's settings."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.harness.loadgen import Measurement

IN_PROCESS = "in-process"  # ``System.load`` of a system without a server or load generator


@dataclass
class System:
    """One benchmarked system of a workload.

    Attributes:
        workload: ``"text_embedding"``, ``"ctr_ranking"`` or ``"ctr_session"``.
        key: short identifier used by the comparisons (e.g. ``"triton_fp32"``).
        name: what the table shows.
        load: ``"perf_analyzer"``, ``"python"`` (the Python load generator) or ``IN_PROCESS``.
        accuracy: what the table shows next to the speed (e.g. ``"min cos 0.99908"``).
        levels: one :class:`Measurement` per concurrency level; in-process systems have one
            entry with ``concurrency`` 0.
        notes: short remarks (e.g. the average executed batch per level).
        values: numbers the report and comparisons use (e.g. ``{"min_cosine": 0.999}``).
    """

    workload: str
    key: str
    name: str
    load: str
    accuracy: str = ""
    levels: list[Measurement] = field(default_factory=list)
    notes: str = ""
    values: dict[str, float] = field(default_factory=dict)

    def at(self, concurrency: int) -> Measurement | None:
        """The level measured at ``concurrency`` (in-process systems: their only entry)."""
        if self.load == IN_PROCESS:
            return self.levels[0] if self.levels else None
        return next((m for m in self.levels if m.concurrency == concurrency), None)

    def peak(self) -> Measurement | None:
        """The level with the highest throughput."""
        return max(self.levels, key=lambda m: m.throughput, default=None)


@dataclass
class Run:
    """A whole run: machine facts, settings, inputs, and every system measured."""

    started: str
    quick: bool
    machine: dict[str, str]
    settings: dict[str, object]
    inputs: dict[str, str]
    systems: list[System] = field(default_factory=list)

    def find(self, workload: str, key: str) -> System | None:
        """The system ``key`` of ``workload``, or None if it was not measured."""
        return next((s for s in self.systems if (s.workload, s.key) == (workload, key)), None)

    def save(self, path: Path) -> None:
        """Write the run as JSON."""
        path.write_text(json.dumps(dataclasses.asdict(self), indent=1) + "\n")
