"""The speed comparisons of ``make bench``, each a ratio of two systems of one run checked
against a bound (e.g. served ≥ 2.8× in-process sentence-transformers at batch 32).

Each comparison puts two systems measured minutes apart on the same inputs side by side, so machine
speed cancels out; what remains is the noise of a shared machine (seen here: ±15 % run to run).
"""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks.harness.results import Run, System

TEXT, RANKING = "text_embedding", "ctr_ranking"
MIN_COSINE = 0.99


@dataclass(frozen=True)
class Target:
    """One comparison: the measured ratio ``value`` against the bound ``goal``; ``higher`` says
    which side passes (``value >= goal`` when True, ``value <= goal`` otherwise)."""

    name: str
    value: float | None
    goal: float
    higher: bool
    detail: str
    also: str = ""  # a second condition that failed (e.g. "p99 not lower"); "" = none

    @property
    def met(self) -> bool | None:
        """True/False, or None when a system was not measured."""
        if self.value is None:
            return None
        passed = self.value >= self.goal if self.higher else self.value <= self.goal
        return passed and not self.also

    def verdict(self) -> str:
        """``met``, ``missed by N %`` (and the failed condition), or ``not measured``."""
        if self.met is None:
            return "not measured"
        if self.met:
            return "met"
        if (self.value >= self.goal) if self.higher else (self.value <= self.goal):
            return f"missed: {self.also}"
        gap = (self.goal / self.value - 1) if self.higher else (self.value / self.goal - 1)
        return f"missed by {gap:.0%}" + (f"; {self.also}" if self.also else "")


def _thr(system: System | None, concurrency: int | None = None) -> float | None:
    if system is None:
        return None
    m = system.peak() if concurrency is None else system.at(concurrency)
    return m.throughput if m else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def best_served_text(run: Run, min_cosine: float = MIN_COSINE) -> System | None:
    """The text_embedding ensemble variant with the highest peak throughput among those whose
    min cosine to sentence-transformers is ≥ ``min_cosine``."""
    candidates = [
        s
        for s in run.systems
        if s.workload == TEXT
        and (s.key == "triton_fp32" or s.key.startswith("triton_v"))
        and s.values.get("min_cosine", 0) >= min_cosine
    ]
    return max(candidates, key=lambda s: _thr(s) or 0, default=None)


def best_served_ranking(run: Run) -> System | None:
    """The ctr_ranking ensemble variant with the highest throughput at concurrency 8."""
    candidates = [
        s for s in run.systems if s.workload == RANKING and s.key in ("triton_v1", "triton_v2")
    ]
    return max(candidates, key=lambda s: _thr(s, 8) or 0, default=None)


def evaluate(run: Run) -> list[Target]:
    """Every comparison that this run's measured systems allow (one needing an unmeasured system
    has ``value`` None)."""
    find = run.find
    st32, st1 = find(TEXT, "st_b32"), find(TEXT, "st_b1")
    fp32, naive = find(TEXT, "triton_fp32"), find(TEXT, "naive")
    best = best_served_text(run)
    direct = find(TEXT, "encoder_direct")
    targets = [
        Target(
            "best served embedding (min cos ≥ 0.99) vs in-process sentence-transformers batch 32",
            _ratio(_thr(best), _thr(st32)),
            1.2,
            True,
            f"{best.name if best else '-'}: peak {_thr(best) or 0:.1f}/s "
            f"vs {_thr(st32) or 0:.1f}/s",
        ),
        Target(
            "FP32 ensemble vs in-process sentence-transformers batch 32",
            _ratio(_thr(fp32), _thr(st32)),
            0.8,
            True,
            f"peak {_thr(fp32) or 0:.1f}/s vs {_thr(st32) or 0:.1f}/s",
        ),
    ]
    tuned = find(TEXT, "naive_1thread")
    pairs = (
        ("best served", best, naive, "naive FastAPI server"),
        ("FP32 ensemble", fp32, naive, "naive FastAPI server"),
        ("best served", best, tuned, "tuned naive server (1 PyTorch thread per worker; extra)"),
    )
    for label, system, baseline, against in pairs:
        if baseline is None and against.startswith("tuned"):
            continue
        served16 = system.at(16) if system else None
        naive16 = baseline.at(16) if baseline else None
        ratio = _ratio(
            served16.throughput if served16 else None, naive16.throughput if naive16 else None
        )
        lower_p99 = not (served16 and naive16) or served16.p99_ms < naive16.p99_ms
        targets.append(
            Target(
                f"{label} vs {against}, throughput at concurrency 16 (and lower p99)",
                ratio,
                3.0,
                True,
                f"{served16.throughput:.1f} vs {naive16.throughput:.1f}/s; p99 "
                f"{served16.p99_ms:.0f} vs {naive16.p99_ms:.0f} ms"
                if served16 and naive16
                else "-",
                "" if lower_p99 else "p99 not lower",
            )
        )
    c1, single = (fp32.at(1) if fp32 else None), (st1.at(0) if st1 else None)
    targets.append(
        Target(
            "FP32 ensemble p50 at concurrency 1 vs in-process single-text p50",
            _ratio(c1.p50_ms if c1 else None, single.p50_ms if single else None),
            1.3,
            False,
            f"{c1.p50_ms:.1f} vs {single.p50_ms:.1f} ms" if c1 and single else "-",
        )
    )
    overhead = None
    if fp32 and direct and _thr(fp32, 16) and _thr(direct, 16):
        overhead = 1 - _thr(fp32, 16) / _thr(direct, 16)  # type: ignore[operator]
    targets.append(
        Target(
            "ensemble overhead: throughput lost vs the encoder called directly, concurrency 16",
            overhead,
            0.15,
            False,
            f"{_thr(fp32, 16) or 0:.1f} vs {_thr(direct, 16) or 0:.1f}/s",
        )
    )
    ranking_naive = find(RANKING, "naive")
    ranking_best = best_served_ranking(run)
    v1, v2 = find(RANKING, "triton_v1"), find(RANKING, "triton_v2")
    targets += [
        Target(
            "ctr_ranking best served vs naive FastAPI server, concurrency 8",
            _ratio(_thr(ranking_best, 8), _thr(ranking_naive, 8)),
            5.0,
            True,
            f"{ranking_best.name if ranking_best else '-'}: {_thr(ranking_best, 8) or 0:.1f} vs "
            f"{_thr(ranking_naive, 8) or 0:.1f} requests/s",
        ),
        Target(
            "ctr_ranking INT8 vs FP32, concurrency 8",
            _ratio(_thr(v2, 8), _thr(v1, 8)),
            1.3,
            True,
            f"{_thr(v2, 8) or 0:.1f} vs {_thr(v1, 8) or 0:.1f} requests/s; "
            f"INT8 {v2.accuracy if v2 else '-'}",
        ),
    ]
    return targets
