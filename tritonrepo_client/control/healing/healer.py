"""Self-healing: find the steps that cannot serve, reload only those, prove they serve again.

Triton 2.51 does not restart a Python-backend stub process that died (SIGKILL, the OOM
killer): every request that reaches it fails with ``Stub process '<model>_<group>_<index>' is
not healthy`` while ``/v2/models/<model>/ready`` still says READY, and a plain ``load`` of the
same model changes nothing. A load with the model's *current* config plus one changed parameter
(``tritonrepo_restart``) through the load API's config override brings up fresh stubs and swaps
them in without failing a request of the ensemble.

:class:`Healer` runs a real probe inference on each served model (the probes of
:mod:`tritonrepo_client.control.health`), maps a failure to the step(s) to restore, reloads only
those (never unloads), probes again and reports the time to recovery. Failures that are not a dead
step (a model that is not loaded, a wrong answer) are reported and never reloaded, and a step whose
reload fails is retried with exponential backoff, then given up on.

Every call a pass makes has a deadline (``call_timeout_s`` for the index and configs, the probe
connection's timeout for probes, ``reload_timeout_s`` for a reload), and a call that misses it
is tried once more: Triton 2.51 serves an HTTP load on the frontend thread of its connection, so
a load that never returns (a model stuck LOADING, e.g. a Python model without ``model.py``)
blocks that thread, and the keep-alive connections it serves, the healer's among them, get no
answer to anything. The timed-out connection is dropped; the retry opens a new one, which
another thread serves. A reload that misses its deadline is abandoned, reported as failed, and
never sent again automatically (a second load would wait behind it); the pass goes on with the
other steps.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from tritonrepo_client.connection import ClientError, ServerUnreachable, TritonConnection
from tritonrepo_client.control.healing.diagnosis import (
    dead_stub_models,
    instance_model,
    probe,
    runs_in_stubs,
    twice_on_deadline,
)
from tritonrepo_client.control.healing.reports import ChangeLog, HealReport, StepReport
from tritonrepo_client.control.healing.traffic import Counts, inference_counts
from tritonrepo_client.control.model_calls import used_models
from tritonrepo_client.control.probe_declaration import PROBE_PARAMETER
from tritonrepo_client.control.repository import RepositoryClient
from tritonrepo_client.triton_messages import Kind, kinds_in

# The parameter whose new value makes Triton treat a reload as a config change.
RESTART_PARAMETER = "tritonrepo_restart"
# Restore rounds per pass: a re-probe may reveal a second dead step behind the first.
MAX_ROUNDS = 3
# How often an idle served model is probed when a stub watch runs beside the server, seconds
# (Healer's idle_probe_s).
IDLE_PROBE_S = 120.0


@dataclass
class _Attempts:
    """Reload attempts of one step since it last served; ``next_at`` is time.monotonic() s."""

    count: int = 0
    next_at: float = 0.0


class Healer:
    """Probe the served models, reload the steps that cannot serve, report.

    Args:
        repo: model-repository client (it sends the repository key the loads need).
        models: served models to probe even when they are not loaded (their probe then
            reports them); every loaded model that declares a probe is probed too
            (:meth:`served_models`).
        conn: connection for probes (default ``repo.connection``); give one with a short
            timeout so a hung server does not stall a pass for the repository's deadline.
        probe_rounds: probe inferences per served model per check (>= 1).
        max_attempts: reloads of one step before giving up on it, until it serves again.
        backoff_s: seconds before the second attempt; doubled after each failed one.
        max_backoff_s: cap of the wait between attempts, seconds.
        dead_instances: optional second signal, for a healer that runs beside the server: a
            callable returning the names of stub instances known to have died (the launcher's
            supervisor watches the stub processes). A probe only finds a dead instance of a
            model with several when it lands on it, and under load client requests keep that
            instance busy (each fails after ~1 s), so probes alone can take many seconds.
        call_timeout_s: deadline of each repository index and config read, seconds (tried
            once more when missed: :func:`twice_on_deadline`), whatever ``repo``'s own is.
        reload_timeout_s: deadline of one reload, seconds; a reload that misses it is
            abandoned and reported as failed, then as given up: it is not sent again by this
            healer (a second load of the model would wait behind the first).
        only: probe ``models`` alone, not the other loaded models that declare a probe
            (``tritonrepo-client heal --model``).
        idle_probe_s: with ``dead_instances`` (a stub watch beside the server), how often a
            served model that answered nothing since its last passing probe is probed again,
            seconds: the watch reports a dead stub at once, so the probe only backs it up.
            Without a watch, such a model is probed on every pass.

    A served model whose requests since the last pass were all answered (Triton's statistics:
    :mod:`tritonrepo_client.control.healing.traffic`) is not probed: its traffic vouches for
    it. Under ``make serve`` every pass probed ten models twice each, and with one of them
    under load that cost it 11 % of its throughput on 2 cores
    (``benchmarks/serving/text_serve.py``).
    """

    def __init__(
        self,
        repo: RepositoryClient,
        models: Sequence[str] = (),
        conn: TritonConnection | None = None,
        probe_rounds: int = 2,
        max_attempts: int = 3,
        backoff_s: float = 5.0,
        max_backoff_s: float = 300.0,
        dead_instances: Callable[[], Iterable[str]] | None = None,
        call_timeout_s: float = 10.0,
        reload_timeout_s: float = 120.0,
        only: bool = False,
        idle_probe_s: float = IDLE_PROBE_S,
    ) -> None:
        self.repo = repo
        self.models = tuple(models)
        self.only = only
        self._conn = conn
        self.probe_rounds = max(1, probe_rounds)
        self.max_attempts = max(1, max_attempts)
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.dead_instances = dead_instances
        self.call_timeout_s = call_timeout_s
        self.reload_timeout_s = reload_timeout_s
        self._attempts: dict[str, _Attempts] = {}
        self._pass_loaded: set[str] | None = None  # the index's READY models, this pass
        self._pass_configs: dict[str, dict[str, Any]] = {}  # configs read this pass
        self.idle_probe_s = idle_probe_s
        self._counts: dict[str, Counts] = {}  # requests per model at the end of the last pass
        self._counted_loaded: set[str] = set()  # the READY models then
        self._passed_at: dict[str, float] = {}  # time.monotonic() of the last passing probe

    @property
    def conn(self) -> TritonConnection:
        """The probes' connection: the one given, else the repository client's current one."""
        return self._conn or self.repo.connection

    def served_models(self) -> tuple[str, ...]:
        """The models a pass probes: ``models``, then every other loaded model that declares a
        probe (config parameter ``tritonrepo_probe``), e.g. a described pipeline loaded into the
        running server through the load API. A model of ``models`` that is not loaded stays:
        its probe reports it.

        Raises:
            ServerUnreachable: the server does not answer.
        """
        if self.only:
            return self.models
        extra = sorted(
            m
            for m in self._loaded() - set(self.models)
            if PROBE_PARAMETER in self._loaded_config(m).get("parameters", {})
        )
        return (*self.models, *extra)

    def probe_all(self, models: Iterable[str] | None = None) -> dict[str, str]:
        """Served model -> error, for each of ``models`` (default ``models``) that cannot
        serve."""
        chosen = self.models if models is None else models
        errors = {m: probe(self.conn, m, self.probe_rounds) for m in chosen}
        return {m: e for m, e in errors.items() if e is not None}

    def steps_to_restore(self, model: str, error: str) -> list[str]:
        """The loaded models to reload for ``model``'s probe ``error``: those whose stub it
        names as not healthy (an ensemble step, or ctr_model inside ctr_session's BLS call),
        else ``model`` itself when it runs in stubs and the error blames a stub. [] when the
        failure is not a dead step (not loaded, bad input, wrong output)."""
        loaded = self._loaded()
        named = [m for m in dead_stub_models(error) if m in loaded]
        if named:
            return named
        blames_a_stub = Kind.STUB_ERROR in kinds_in(error)
        if blames_a_stub and model in loaded and runs_in_stubs(self._config(model)):
            return [model]
        return []

    def heal_once(self) -> HealReport:
        """One pass: probe every served model, reload the steps that are due, probe again; a
        re-probe that names another dead step (two killed at once) gets another round, up to
        ``MAX_ROUNDS``. A served model that runs a step ``dead_instances`` names is not probed
        before that step's reload (:meth:`_dead_steps` says why); it counts as failing with the
        watch's cause when the step is not reloaded (backing off, given up).

        Returns:
            The pass's :class:`HealReport`.

        Raises:
            ServerUnreachable: the server does not answer.
        """
        detected_at = time.monotonic()
        self._pass_loaded = None
        self._pass_configs = {}
        served = self.served_models()
        # Read before any probe: a request that reaches a dead stub pins its model in Triton
        # 2.51 for good (see _dead_steps), so the models that run a step known to be dead are
        # not probed until that step has been reloaded.
        dead = self._dead_steps()
        unprobed = {m: cause for users, cause in dead.values() for m in users if m in served}
        vouched = self._vouched_by_traffic(m for m in served if m not in unprobed)
        chosen = [m for m in served if m not in unprobed and m not in vouched]
        report = HealReport(served, self.probe_all(chosen), by_traffic=tuple(vouched))
        now = time.monotonic()
        for model in chosen:
            if model not in report.detected:
                self._passed_at[model] = now
        report.failing = dict(report.detected)
        handled: set[str] = set()
        reprobed: set[str] = set()
        for round_ in range(MAX_ROUNDS):
            plan = self._plan(report, handled)
            if round_ == 0:
                for step, (users, cause) in dead.items():
                    probed, first = plan.get(step, ((), cause))
                    plan[step] = (tuple(dict.fromkeys((*probed, *users))), first)
            if not plan:
                break
            handled |= set(plan)
            steps = [self._restore(step, *plan[step]) for step in plan]
            self._pass_loaded = None  # the reloads changed the index
            retried = {m for s in steps if s.reload_s is not None for m in s.served}
            reprobed |= retried
            after = self.probe_all(retried)
            for model in retried:
                report.failing.pop(model, None)
            report.failing.update(after)
            report.steps += [self._settle(s, after, detected_at) for s in steps]
        for model, cause in unprobed.items():
            report.detected.setdefault(model, cause)
            if model not in reprobed:  # its dead step was not reloaded (backing off, gave up)
                report.failing[model] = cause
        for step in set(self._attempts) - handled:
            del self._attempts[step]  # it serves (or is no longer blamed): counting restarts
        self._counts = self._read_counts()  # after the probes: they are not traffic
        self._counted_loaded = self._loaded() if self._counts else set()
        return report

    def watch_anew(self, dead_instances: Callable[[], Iterable[str]]) -> None:
        """Watch the stubs with ``dead_instances`` from now on (a restarted server's), and probe
        every model on the next pass: a stub killed before the new watch's first look is one
        the watch never saw, so no model may count as idle-but-healthy until probed again."""
        self.dead_instances = dead_instances
        self._counts = {}
        self._passed_at.clear()

    def _read_counts(self) -> dict[str, Counts]:
        """Triton's request counts per model, or {} when they cannot be read (every model is
        then probed)."""
        try:
            return inference_counts(self.conn)
        except ClientError:
            return {}

    def _vouched_by_traffic(self, models: Iterable[str]) -> set[str]:
        """The ``models`` that need no probe this pass: their requests since the last pass
        were all answered, or (with a stub watch) they answered none, passed a probe less than
        ``idle_probe_s`` ago, and no model was loaded or unloaded since the last pass."""
        if not self._counts:
            return set()
        counts = self._read_counts()
        now = time.monotonic()
        unchanged = self._loaded() == self._counted_loaded
        out = set()
        for model in models:
            before, after = self._counts.get(model), counts.get(model)
            if before is None or after is None:
                continue
            if after.vouches_since(before):
                out.add(model)
                self._passed_at[model] = now
            elif after == before and unchanged and self.dead_instances is not None:
                passed = self._passed_at.get(model)
                if passed is not None and now - passed < self.idle_probe_s:
                    out.add(model)
        return out

    def watch(
        self,
        interval_s: float,
        stop: threading.Event,
        on_report: Callable[[HealReport], None],
        on_error: Callable[[ClientError], None] | None = None,
    ) -> None:
        """Run :meth:`heal_once` every ``interval_s`` seconds until ``stop`` is set.

        ``on_report`` gets every pass's report; ``on_error`` (default: ignore) a failure of a
        whole pass, e.g. the server not answering. Never raises ClientError.
        """
        while not stop.is_set():
            try:
                on_report(self.heal_once())
            except ClientError as exc:
                if on_error is not None:
                    on_error(exc)
            stop.wait(interval_s)

    def loaded_models(self) -> set[str]:
        """Models with a READY version (the repository index), the steps it may reload; read
        within ``call_timeout_s`` (tried twice).

        Raises:
            ClientError: the repository index cannot be read.
        """
        rows = twice_on_deadline(lambda: self.repo.index(self.call_timeout_s))
        return {r.name for r in rows if r.state == "READY"}

    def _loaded(self) -> set[str]:
        """:meth:`loaded_models`, read once per pass (and again after its reloads)."""
        if self._pass_loaded is None:
            self._pass_loaded = self.loaded_models()
        return self._pass_loaded

    def _config(self, model: str) -> dict[str, Any]:
        """The loaded ``model``'s config, read within ``call_timeout_s`` (tried twice).

        Raises:
            ClientError: not loaded, or no answer.
        """
        return twice_on_deadline(lambda: self.repo.config(model, self.call_timeout_s))

    def _plan(
        self, report: HealReport, handled: set[str]
    ) -> dict[str, tuple[tuple[str, ...], str]]:
        """step -> (served models it fails, first cause), for the models ``report.failing``
        lists, leaving out steps ``handled`` this pass; failures that are not a dead step go to
        ``report.unhealable``."""
        plan: dict[str, tuple[tuple[str, ...], str]] = {}
        for model, error in report.failing.items():
            steps = self.steps_to_restore(model, error)
            if not steps:
                report.unhealable[model] = error
            for step in (s for s in steps if s not in handled):
                served, cause = plan.get(step, ((), error))
                plan[step] = ((*served, model), cause)
        return plan

    def _dead_steps(self) -> dict[str, tuple[tuple[str, ...], str]]:
        """step -> (loaded models that run it, cause) for the loaded models of
        ``dead_instances()``: those :meth:`_served_by` names, the step itself only when it is
        served (as a probe names them), else all served models (an undeclared BLS call); ``{}``
        without ``dead_instances``.

        Their served models are reloaded without a probe first: on Triton 2.51 every request
        that reaches a dead stub leaves the model it belongs to held for good (python_backend
        ``ProcessRequests`` returns on "Stub process ... is not healthy" before it deletes the
        request's response factory, which holds the model), so the model replaced by the reload
        is never unloaded and a stop waits out ``--exit-timeout-secs``, then exits 1.

        Raises:
            ClientError: the repository index cannot be read.
        """
        dead = list(self.dead_instances()) if self.dead_instances else []
        # Read after the scan, not the pass's earlier view: a model unloaded since (its stubs
        # end with it) must not be loaded again.
        loaded = self.loaded_models() if dead else set()
        steps: dict[str, tuple[tuple[str, ...], str]] = {}
        for instance in dead:
            step = instance_model(instance)
            if step in loaded and step not in steps:
                served = self.served_models()
                users = tuple(m for m in self._served_by(step) if m != step or m in served)
                steps[step] = (users or served, f"the stub process of {instance} is gone")
        return steps

    def _served_by(self, step: str) -> tuple[str, ...]:
        """Loaded models that are ``step`` or run it (a served one or one loaded at runtime): as
        an ensemble step or through a BLS call their configs declare (``tritonrepo_calls``:
        :func:`tritonrepo_client.control.model_calls.used_models`, nested ensembles and calls
        included); the served models when none does (an undeclared BLS call)."""
        users = [
            model
            for model in sorted(self._loaded())
            if model == step or step in used_models([model], self._loaded_config)
        ]
        return tuple(users) or self.served_models()

    def _loaded_config(self, model: str) -> dict[str, Any]:
        """A loaded model's config, read once per pass; ``{}`` when it cannot be read (no
        longer loaded).

        Raises:
            ServerUnreachable: the server does not answer.
        """
        if model not in self._pass_configs:
            try:
                self._pass_configs[model] = self._config(model)
            except ServerUnreachable:
                raise
            except ClientError:
                return {}  # unloaded since the index was read: not one to probe or reload
        return self._pass_configs[model]

    def _restore(self, step: str, served: tuple[str, ...], cause: str) -> StepReport:
        """Reload ``step`` when an attempt is due; the outcome is settled after the re-probe."""
        attempts = self._attempts.setdefault(step, _Attempts())
        now = time.monotonic()
        if attempts.count >= self.max_attempts:
            detail = f"gave up after {attempts.count} reloads; fix it and load it by hand"
            return StepReport(step, served, cause, "gave up", attempts.count, detail=detail)
        if now < attempts.next_at:
            detail = f"next reload in {attempts.next_at - now:.0f} s; {cause}"
            return StepReport(step, served, cause, "backing off", attempts.count, detail=detail)
        abandoned = self.repo.abandoned_s(step)
        if abandoned is not None:
            detail = (
                f"its reload did not return within {self.reload_timeout_s:.0f} s "
                f"({abandoned:.0f} s ago) and Triton cannot cancel it; not sending another "
                "behind it: load it by hand once it is fixed, or restart the server"
            )
            return StepReport(step, served, cause, "gave up", attempts.count, detail=detail)
        attempts.count += 1
        start = time.monotonic()
        try:
            self.reload(step)
        except ClientError as exc:
            self._fail(step)
            return StepReport(step, served, cause, "failed", attempts.count, detail=str(exc))
        reload_s = time.monotonic() - start
        return StepReport(step, served, cause, "pending", attempts.count, reload_s=reload_s)

    def _settle(self, step: StepReport, after: dict[str, str], detected_at: float) -> StepReport:
        """Turn a reloaded step's "pending" into "restored" (no re-probe error blames it) or
        "failed"."""
        if step.outcome != "pending":
            return step
        errors = [after[m] for m in step.served if m in after and _blames(step.step, m, after[m])]
        if not errors:
            del self._attempts[step.step]
            recovery_s = time.monotonic() - detected_at
            return replace(step, outcome="restored", recovery_s=recovery_s)
        self._fail(step.step)
        return replace(
            step, outcome="failed", detail=f"still failing after the reload: {errors[0]}"
        )

    def reload(self, step: str) -> None:
        """Reload ``step`` with its current config and a new ``tritonrepo_restart`` parameter
        (fresh instances, swapped in by Triton; the override stays until an unload).

        Raises:
            ControlTimeout: the load did not return within ``reload_timeout_s`` (abandoned).
            ClientError: Triton refused or the load failed.
        """
        config = self._config(step)
        parameters = config.setdefault("parameters", {})
        parameters[RESTART_PARAMETER] = {"string_value": str(time.time_ns())}
        self.repo.load(step, config, timeout_s=self.reload_timeout_s)

    def _fail(self, step: str) -> None:
        """Count a failed attempt: the next one waits backoff_s * 2**(failures - 1) seconds."""
        attempts = self._attempts[step]
        wait = min(self.backoff_s * 2 ** (attempts.count - 1), self.max_backoff_s)
        attempts.next_at = time.monotonic() + wait


def _blames(step: str, model: str, error: str) -> bool:
    """Whether ``model``'s probe ``error`` still points at ``step``: it names ``step``'s stub,
    or names no dead stub at all (the step's reload may have broken the model)."""
    named = dead_stub_models(error)
    return step in named or not named


__all__ = [
    "RESTART_PARAMETER",
    "ChangeLog",
    "HealReport",
    "Healer",
    "StepReport",
    "dead_stub_models",
    "instance_model",
    "probe",
    "runs_in_stubs",
]
