"""A canary by traffic weight: a new version of a pipeline's core model takes a growing share of
the pipeline's live requests, is compared with the serving version on live figures, and is
promoted or rolled back by itself.

``canary_rollout(pipeline, model, N)`` on one server behind the HTTP guard:

1. **pin** and 2. **stage**, by the form the pipeline is served in
   (:mod:`tritonrepo_client.control.canary_forms`): for an ensemble, its ``model`` step pinned
   to the serving version ``old``, ``model`` loaded with both versions, and the canary
   ensemble ``<pipeline>__canary`` (the step pinned to N) loaded through the load API; for a
   pipeline served as one Python model, a copy of it loaded as ``<pipeline>__canary`` that runs
   as version N;
3. **shadow, then steps**: the guard copies ``shadow`` percent of the pipeline's requests to the
   canary and compares the answers, every output by a measure of its type (or the pipeline's
   declared ``[canary]``: :mod:`tritonrepo_client.control.canary_measures`); then, for each
   weight of ``steps`` (percent), sends that share of requests to the canary ensemble and
   watches one analysis window: Triton's per-model
   request, failure and p99 figures of both ensembles, and the shadow comparison;
4. **decide**: the canary is rolled back at once when it fails more than the serving version
   (by ``max_error_ratio_delta``), its latency is over ``max_p99_ratio`` times the serving one's
   (``canary_policy.slower``: on the shadow copies, which both answer at once, or on Triton's
   figures without enough of them; at the quantile the window's requests support), or a
   compared output breaks its limit (a share of agreeing rows, or a quantile of their
   similarity); after the last step it is promoted;
5. **promote** or **roll back**, by the form (:mod:`tritonrepo_client.control.canary_forms`).
   The route goes before anything is unloaded, so no request is sent to a model that is going
   away.

Each decision is printed, logged by the guard and counted in its
``tritonrepo_canary_decisions_total`` (``/_guard/metrics``). gRPC requests do not pass the
guard: they reach the pinned serving version throughout, and the canary's figures are HTTP's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tritonrepo_client.connection import ClientError
from tritonrepo_client.control.canary_forms import (
    CANARY_SUFFIX,
    CanaryError,
    canary_form,
    is_one_step,
    pinned,
    restore_ensemble,
    step_of,
)
from tritonrepo_client.control.canary_measures import (
    Measure,
    default_measures,
    with_declared,
    with_min_agreement,
)
from tritonrepo_client.control.canary_policy import CanaryPolicy, compared_line, judge
from tritonrepo_client.control.guard_routes import GuardRoutes, Route
from tritonrepo_client.control.live_metrics import Window, snapshot
from tritonrepo_client.control.repository import RepositoryClient

AGREEMENT_PARAMETER = "tritonrepo_canary"  # the pipeline's declared agreement (JSON)


@dataclass
class CanaryReport:
    """What happened: ``decision`` (``promote``, ``rollback``, or ``report`` after a shadow
    window alone), ``reason``, one line per step and window, and what the shadow copies
    compared (``compared``: ``<output>:<measure>`` each)."""

    pipeline: str
    model: str
    old: int
    new: int
    decision: str = ""
    reason: str = ""
    lines: list[str] = field(default_factory=list)
    seconds: float = 0.0
    compared: list[str] = field(default_factory=list)


def declared_agreement(config: dict[str, Any]) -> dict[str, Any] | None:
    """The pipeline's ``tritonrepo_canary`` parameter: ``{"output", "measure", "min"}``."""
    text = config.get("parameters", {}).get(AGREEMENT_PARAMETER, {}).get("string_value")
    return json.loads(text) if text else None


def compared_measures(
    repo: RepositoryClient, pipeline: str, config: dict[str, Any], min_agreement: float | None
) -> list[Measure]:
    """What the shadow copies compare: every output of ``pipeline`` by a measure chosen from its
    datatype and shape, the one its ``[canary]`` declares its way, every share and quantile
    limit ``min_agreement`` when given (:mod:`tritonrepo_client.control.canary_measures`).

    Raises:
        CanaryError: ``min_agreement`` given and no output takes it, or the declaration names a
            measure the guard does not have; ClientError: the metadata cannot be read.
    """
    metadata = repo.connection.client.get_model_metadata(pipeline)
    outputs = metadata["outputs"] if isinstance(metadata, dict) else [
        {"name": o.name, "datatype": o.datatype, "shape": list(o.shape)}
        for o in metadata.outputs
    ]  # fmt: skip
    batched = int(config.get("max_batch_size", 0) or 0) > 0
    try:
        measures = with_declared(default_measures(outputs, batched), declared_agreement(config))
        return with_min_agreement(measures, min_agreement)
    except ValueError as exc:
        raise CanaryError(str(exc)) from None


def _watch(
    pipeline: str,
    canary: str,
    routes: GuardRoutes,
    metrics_url: str,
    policy: CanaryPolicy,
    measures: list[Measure],
    ensemble: bool,
) -> tuple[str | None, str]:
    """One analysis window: ``(why the canary must go, or None; the window's figures)``. It
    ends early on a reason, and is extended (up to twice) until the canary had
    ``min_requests`` requests."""
    window = Window(snapshot(metrics_url))
    began = time.time()
    deadline = time.monotonic() + policy.window_s
    longest = time.monotonic() + 2 * policy.window_s
    while True:
        time.sleep(policy.interval_s)
        window.add(snapshot(metrics_url))
        shadow = routes.shadow(pipeline, began)
        why = judge(window, pipeline, canary, shadow, policy, measures, ensemble)
        requests, failed = window.requests(canary, ensemble)
        now = time.monotonic()
        if why or (now >= deadline and requests >= policy.min_requests) or now >= longest:
            break
    if why is None and requests < policy.min_requests:
        why = f"only {requests:.0f} canary requests in the window (needs {policy.min_requests})"

    def ms(worst_us: dict[str, float], model: str) -> str:
        return f"{worst_us.get(model, 0) / 1000:.1f}"

    figures = (
        f"canary {requests:.0f} requests, {failed:.0f} failed, p50/p99 "
        f"{ms(window.worst_p50_us, canary)}/{ms(window.worst_p99_us, canary)} ms (serving "
        f"{ms(window.worst_p50_us, pipeline)}/{ms(window.worst_p99_us, pipeline)} ms); shadow "
        f"{shadow.get('compared', 0)} compared ({compared_line(shadow, measures)}), "
        f"p50/p99 {shadow.get('canary_p50_ms')}/{shadow.get('canary_p99_ms')} ms (serving "
        f"{shadow.get('stable_p50_ms')}/{shadow.get('stable_p99_ms')} ms)"
    )
    return why, figures


def canary_rollout(
    repo: RepositoryClient,
    routes: GuardRoutes,
    metrics_url: str,
    pipeline: str,
    model: str,
    version: int,
    policy: CanaryPolicy | None = None,
    say: Callable[[str], None] = print,
) -> CanaryReport:
    """Roll ``model`` to ``version`` through a traffic-weighted canary of ``pipeline``
    (module docstring).

    Args:
        repo: client with the repository key (the server's HTTP port: the guard).
        routes: the guard's routes API on the same port.
        metrics_url: Triton's metrics ``host:port``.
        pipeline: the served ensemble whose traffic is split.
        model: its step model to roll (e.g. ``text_embedding_encoder``).
        version: the version to roll to (in the server's repository).
        policy: steps, windows and thresholds (defaults: :class:`CanaryPolicy`).
        say: where each step's line goes.

    Returns:
        The report; ``decision`` is ``promote``, ``rollback`` (not an error) or, with no
        ``steps`` (the shadow window alone), ``report``: nothing changed.

    Raises:
        CanaryError: it cannot start (not an ensemble step, the step pinned to a version, one
            version serving, a route exists), or undoing a step failed too.
        KeyboardInterrupt: interrupted; raised again once the canary is rolled back.
    """
    policy = policy or CanaryPolicy()
    start = time.monotonic()
    if pipeline in routes.routes():
        raise CanaryError(
            f"'{pipeline}' has a route already: another canary runs, or one did not finish "
            f"(undo it: tritonrepo-client canary {pipeline} --model {model} --abort)"
        )
    form = canary_form(repo, pipeline, model, version)
    canary = form.canary
    measures = compared_measures(repo, pipeline, form.config, policy.min_agreement)
    agreement = [m.route_spec() for m in measures] or None
    report = CanaryReport(pipeline, form.model, form.old, version)
    report.compared = [m.key for m in measures]

    def line(text: str) -> None:
        report.lines.append(text)
        say(f"  {text}")

    def decide(decision: str, weight: float, reason: str) -> None:
        routes.decide(pipeline, canary, decision, weight, reason)
        line(f"{decision} at {weight:g} %: {reason}")

    def remove_route() -> None:
        routes.remove(pipeline)

    weight = 0.0
    try:
        line(form.stage())
        routes.clear_shadow(pipeline)
        routes.set(pipeline, Route(canary, 0.0, policy.shadow, agreement))
        decide("start", 0.0, f"shadow {policy.shadow:g} % of requests")
        # The shadow window (weight 0: only copies reach the canary), then each step.
        for weight in ((0.0,) if policy.shadow else ()) + tuple(policy.steps):
            routes.set(pipeline, Route(canary, weight, policy.shadow, agreement))
            if weight:
                decide("step", weight, f"{weight:g} % of requests to {canary}")
            why, figures = _watch(pipeline, canary, routes, metrics_url, policy, measures,
                                  form.ensemble)  # fmt: skip
            line(f"window at {weight:g} %: {figures}")
            if why is not None:
                form.undo(remove_route)
                decide("rollback", weight, why)
                report.decision, report.reason = "rollback", why
                break
            if not policy.steps:  # shadow only: report, change nothing
                form.undo(remove_route)
                decide("report", weight, f"shadow window passed: {figures}")
                report.decision, report.reason = "report", figures
                break
        else:
            form.promote(remove_route)
            reason = f"every window passed; {form.model} serves version {version}"
            decide("promote", weight, reason)
            report.decision, report.reason = "promote", reason
    except (ClientError, TimeoutError, KeyboardInterrupt) as exc:
        # An interrupt (Ctrl-C, or SIGTERM through the command line) is undone like a failed
        # step, then raised again: the route, the canary and the pin go with it.
        why = "interrupted" if isinstance(exc, KeyboardInterrupt) else f"a step failed: {exc}"
        try:
            form.undo(remove_route)
            decide("rollback", weight, why)
        except (ClientError, TimeoutError) as again:
            raise CanaryError(
                f"canary of {model} {version}: {why}, and undoing it failed too: {again}"
            ) from None
        if isinstance(exc, KeyboardInterrupt):
            raise
        report.decision, report.reason = "rollback", why
    report.seconds = time.monotonic() - start
    return report


def abort_canary(repo: RepositoryClient, routes: GuardRoutes, pipeline: str, model: str) -> str:
    """Undo what a canary of ``pipeline`` left when its process was killed outright (SIGKILL;
    an interrupt is undone by :func:`canary_rollout` itself): the route removed, the canary
    unloaded and, for an ensemble, ``model`` serving the version the pipeline's step is pinned
    to alone and the step unpinned. Steps already undone are skipped; a ``rollback`` decision
    (``aborted``) is recorded.

    Returns:
        What was done, one line.

    Raises:
        CanaryError: ``model`` is neither a step of ``pipeline`` nor its one-step model's, or
            it serves several versions without a pin (which one to keep is unknown).
        ClientError: a call failed.
    """
    config = repo.config(pipeline)
    one_step = is_one_step(config)
    rolled = pipeline if one_step else model
    pin = -1 if one_step else int(step_of(config, model).get("model_version", -1))
    serving = repo.versions(rolled)
    if pin == -1 and len(serving) > 1:
        raise CanaryError(
            f"'{pipeline}' does not pin {rolled}, which serves {serving}: which version to keep "
            f"is unknown (tritonrepo-client rollout {rolled} picks one)"
        )
    route = routes.remove(pipeline)
    done = ["route removed"] if route is not None else []
    keep = pin if pin != -1 else serving[0]
    done += restore_ensemble(repo, pipeline, rolled, keep, repo.config(rolled))
    if pin != -1:
        repo.load(pipeline, pinned(config, model, -1))
        done.append(f"{pipeline} unpinned")
    what = ", ".join(done) or "nothing left to undo"
    routes.decide(pipeline, pipeline + CANARY_SUFFIX, "rollback",
                  route.weight if route else 0.0, f"aborted: {what}")  # fmt: skip
    return what
