"""The ``canary`` command: a traffic-weighted canary of a pipeline's core model that promotes or
rolls back by itself (:mod:`tritonrepo_client.control.canary`)."""

from __future__ import annotations

import argparse
import signal

from tritonrepo_client.cli.control import _repository
from tritonrepo_client.control.canary import CanaryError, abort_canary, canary_rollout
from tritonrepo_client.control.canary_policy import P99_REQUESTS, CanaryPolicy
from tritonrepo_client.control.guard_routes import GuardRoutes, GuardRoutesError
from tritonrepo_client.core import resolve_url


def add_parser(sub: argparse._SubParsersAction) -> None:
    """``canary PIPELINE --model M --version N [--steps 10,50] [--shadow 10] [--window 60]``."""
    cmd = sub.add_parser(
        "canary",
        help="roll a pipeline's model to a version on a share of live traffic, then promote "
        "or roll back by itself (HTTP guard)",
    )
    cmd.add_argument(
        "pipeline",
        help="the served pipeline whose requests are split (an ensemble, or one Python model)",
    )
    cmd.add_argument(
        "--model",
        required=True,
        help="its step model to roll (a one-model pipeline: itself or its core)",
    )
    cmd.add_argument("--version", type=int, help="the version to roll to")
    cmd.add_argument(
        "--abort",
        action="store_true",
        help="undo what a canary of the pipeline left when it was killed outright: remove its "
        "route, unload <pipeline>__canary, serve the pinned version alone, unpin the step",
    )
    cmd.add_argument(
        "--steps",
        default="10,50",
        help="canary shares of requests, percent, comma-separated (each 1-50)",
    )
    cmd.add_argument(
        "--shadow",
        type=float,
        default=10.0,
        help="percent of requests copied to the canary and compared",
    )
    cmd.add_argument("--window", type=float, default=60.0, help="analysis window per step, s")
    cmd.add_argument("--min-requests", type=int, default=20)
    cmd.add_argument("--max-error-ratio-delta", type=float, default=0.01)
    cmd.add_argument(
        "--max-p99-ratio",
        type=float,
        default=2.0,
        help="the canary's p99 may be this many times the serving version's (its p50, while "
        f"it has had fewer than {P99_REQUESTS} requests in the window)",
    )
    cmd.add_argument(
        "--min-agreement",
        type=float,
        help="the limit of every output compared by a share of agreeing rows (labels, argmax, "
        "decisions) or a quantile of their similarity (5th percentile of cosine or overlap); "
        "default: each measure's own, or the pipeline's declared [canary] min; refused when no "
        "output is compared so",
    )
    cmd.add_argument(
        "--metrics-url",
        help="Triton's metrics host:port (default: the metrics port the guard at --url says, on "
        "--url's host; refused when it cannot say)",
    )


def _metrics_url(url: str, routes: GuardRoutes) -> str:
    """``host:port`` of the metrics of the server the guard at ``url`` routes to: the port the
    guard was told (``tritonrepo-serve`` and the deployments tell it), on ``url``'s host.

    Raises:
        CanaryError: the guard cannot say (give ``--metrics-url``).
    """
    try:
        port = routes.metrics_port()
    except GuardRoutesError as exc:
        raise CanaryError(f"cannot ask the guard where Triton's metrics are ({exc}): "
                          "give --metrics-url host:port") from None  # fmt: skip
    if port is None:
        raise CanaryError(
            "the guard at the given URL does not know Triton's metrics port: give "
            "--metrics-url host:port (the canary's figures are read there)"
        )
    return f"{url.rpartition(':')[0]}:{port}"


def _interrupted(signum: int, frame: object) -> None:
    """SIGTERM handler: stop the canary the way Ctrl-C does (it is rolled back first)."""
    raise KeyboardInterrupt


def _abort(args: argparse.Namespace) -> int:
    """``canary PIPELINE --model M --abort``: exit 0 once undone."""
    args.url = resolve_url(args.url, "http", None)
    with _repository(args) as repo:
        what = abort_canary(repo, GuardRoutes(args.url, repo.headers, args.timeout),
                            args.pipeline, args.model)  # fmt: skip
    print(f"{args.pipeline}: canary aborted: {what}")
    return 0


def canary_command(args: argparse.Namespace) -> int:
    """Run the canary; exit 0 when promoted (or, shadow only, reported), 3 when rolled back,
    130 when interrupted (SIGINT or SIGTERM; rolled back first)."""
    if args.abort:
        return _abort(args)
    if args.version is None:
        raise ValueError("canary needs --version (or --abort)")
    try:
        steps = tuple(float(s) for s in args.steps.split(",") if s.strip())
    except ValueError:
        raise ValueError(
            f"--steps {args.steps!r}: give shares of 1 to 50 percent, comma-separated"
        ) from None
    policy = CanaryPolicy(
        steps=steps,
        shadow=args.shadow,
        window_s=args.window,
        min_requests=args.min_requests,
        max_error_ratio_delta=args.max_error_ratio_delta,
        max_p99_ratio=args.max_p99_ratio,
        min_agreement=args.min_agreement,
    )
    if args.protocol != "http":
        raise ValueError("canary works through the HTTP guard: use --protocol http (the default)")
    args.url = resolve_url(args.url, "http", None)
    previous = signal.signal(signal.SIGTERM, _interrupted)
    try:
        with _repository(args) as repo:
            routes = GuardRoutes(args.url, repo.headers, args.timeout)
            metrics_url = args.metrics_url or _metrics_url(args.url, routes)
            report = canary_rollout(
                repo, routes, metrics_url, args.pipeline, args.model, args.version, policy
            )
    except KeyboardInterrupt:
        print(f"{args.pipeline}: interrupted; the canary of {args.model} is rolled back")
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(
        f"{report.pipeline}: {report.decision} of {report.model} version {report.new} "
        f"(was {report.old}) in {report.seconds:.1f} s: {report.reason}"
    )
    return 3 if report.decision == "rollback" else 0
