"""What a self-healing pass reports: one :class:`StepReport` per step it restored or would
have, the pass's :class:`HealReport`, and :class:`ChangeLog`, the log lines of successive passes
without repeats (written by :class:`tritonrepo_client.control.healing.healer.Healer`)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class StepReport:
    """What the healer did about one step (a model it reloads or would reload).

    Attributes:
        step: the model to restore.
        served: the served models whose probes failed because of it.
        cause: the probe error that named it (one line).
        outcome: ``"restored"``, ``"failed"`` (reload or re-probe failed; retried later),
            ``"backing off"`` (waiting for the next attempt) or ``"gave up"``.
        attempt: reload attempts for this step so far (this one included).
        recovery_s: seconds from detection (the failed probe) to a passing probe; None unless
            restored.
        reload_s: seconds the reload took; None when none was made.
        detail: the reload or re-probe error, or when the next attempt is due.
    """

    step: str
    served: tuple[str, ...]
    cause: str
    outcome: str
    attempt: int
    recovery_s: float | None = None
    reload_s: float | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        """Whether the step serves again."""
        return self.outcome == "restored"

    def line(self) -> str:
        """One log line, e.g. ``restored text_embedding_tokenize (for text_embedding) in 2.1 s
        (reload 1.5 s): Stub process 'text_embedding_tokenize_0_0' is not healthy.``"""
        served = ", ".join(self.served)
        if self.ok:
            return (
                f"restored {self.step} (for {served}) in {self.recovery_s:.1f} s "
                f"(reload {self.reload_s:.1f} s, attempt {self.attempt}): {self.cause}"
            )
        return f"{self.outcome} {self.step} (for {served}, attempt {self.attempt}): {self.detail}"


@dataclass
class HealReport:
    """One pass of :meth:`Healer.heal_once`.

    Attributes:
        probed: the served models checked: probed, or vouched for by their own traffic.
        by_traffic: the served models not probed because their requests since the last pass
            were all answered, or (beside a stub watch) because they were idle and passed a
            probe recently.
        detected: served model -> probe error at the start of the pass, or the stub watch's
            cause for one not probed because a step it runs is dead (empty when all serve).
        steps: one :class:`StepReport` per step the pass restored or would have.
        unhealable: served model -> error of failures that are not a dead step (not reloaded).
        failing: served model -> error after the pass; empty means every served model serves.
    """

    probed: tuple[str, ...] = ()
    detected: dict[str, str] = field(default_factory=dict)
    steps: list[StepReport] = field(default_factory=list)
    unhealable: dict[str, str] = field(default_factory=dict)
    failing: dict[str, str] = field(default_factory=dict)
    by_traffic: tuple[str, ...] = ()

    @property
    def healthy(self) -> bool:
        """Whether every served model serves after the pass."""
        return not self.failing

    def lines(self) -> list[str]:
        """Log lines: one per step, one per model that is not healable."""
        out = [s.line() for s in self.steps]
        out += [f"cannot heal {m} (not a dead step): {e}" for m, e in self.unhealable.items()]
        return out


class ChangeLog:
    """Log lines of successive :class:`HealReport` s without repeats: every reload's outcome,
    but a step given up on, or a failure that is not a dead step, only when first seen."""

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def lines(self, report: HealReport) -> list[str]:
        """The lines of ``report`` worth logging now."""
        quiet = {s.line() for s in report.steps if s.outcome in ("gave up", "backing off")}
        quiet |= {ln for ln in report.lines() if ln.startswith("cannot heal ")}
        out = [ln for ln in report.lines() if ln not in quiet or ln not in self._seen]
        out = [ln for ln in out if not ln.startswith("backing off ")]
        self._seen = quiet if report.failing else set()
        return out


__all__ = ["ChangeLog", "HealReport", "StepReport"]
