"""The command line's model-control commands, which need the repository key: ``models``,
``rollout``, ``rollback`` and ``heal`` (the parser is in :mod:`tritonrepo_client.cli.app`)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tritonrepo_client.connection import GrpcTls, TritonConnection
from tritonrepo_client.control import local, repository_key
from tritonrepo_client.control.healing.healer import ChangeLog, Healer, HealReport
from tritonrepo_client.control.load_checks import check_load, check_rollout_name
from tritonrepo_client.control.model_calls import ConfigReader, disk_configs
from tritonrepo_client.control.repository import RepositoryClient
from tritonrepo_client.control.rollout import (
    DEFAULT_PROBE_TEXTS,
    Canary,
    EmbeddingCanary,
    RolloutReport,
    TensorCanary,
    rollback,
    rollout,
)
from tritonrepo_client.validation import read_config_file
from tritonrepo_format.configs import ConfigParseError


def local_repository() -> Path:
    """The model repository the CLI reads locally: ``$TRITONREPO_MODEL_REPOSITORY``, else this
    checkout's ``model_repository/``."""
    return Path(
        os.environ.get("TRITONREPO_MODEL_REPOSITORY", local.local_repository().model_repository)
    )


def add_local_checks_arguments(parser: argparse.ArgumentParser, load: bool) -> None:
    """``--model-repository`` (and for ``models load`` ``--model-config-name`` and
    ``--force``): where the local checks (:mod:`tritonrepo_client.control.load_checks`) read the
    server's repository."""
    parser.add_argument(
        "--model-repository",
        type=Path,
        default=local_repository(),
        help="the server's model repository, checked before anything is sent when it is here "
        "(default: $TRITONREPO_MODEL_REPOSITORY, else this checkout's)",
    )
    if not load:
        return
    parser.add_argument(
        "--model-config-name",
        default="cpu",
        help="the config set the server runs, for the local checks ('' = config.pbtxt)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="load even if the new config no longer matches a loaded ensemble that uses it",
    )


def tls_from_args(args: argparse.Namespace) -> GrpcTls | None:
    """TLS settings from ``--grpc-root-cert`` (and the client pair), for ``--protocol grpc``."""
    if args.grpc_root_cert is None:
        return None
    return GrpcTls(args.grpc_root_cert, args.grpc_client_cert, args.grpc_client_key)


def _repository(args: argparse.Namespace) -> RepositoryClient:
    key = repository_key.resolve_key(args.repository_key_file)
    return RepositoryClient(
        args.url, args.protocol, key=key or "", timeout_s=args.timeout, tls=tls_from_args(args)
    )


def _local_configs(args: argparse.Namespace) -> ConfigReader | None:
    """The configs of ``--model-repository`` under ``--model-config-name`` when that folder is
    here (a config that does not parse reads as none: the local checks report it)."""
    folder = getattr(args, "model_repository", None)
    if folder is None or not Path(folder).is_dir():
        return None
    read = disk_configs(Path(folder), getattr(args, "model_config_name", "cpu") or None)

    def config_of(model: str) -> Mapping[str, Any] | None:
        try:
            return read(model)
        except ConfigParseError:
            return None

    return config_of


def models_command(args: argparse.Namespace) -> int:
    with _repository(args) as repo:
        if args.action == "list":
            rows = repo.index()
            print(f"{'MODEL':<28} {'VERSION':>7}  {'STATE':<12} REASON")
            for row in sorted(rows, key=lambda r: (r.name, r.version)):
                print(
                    f"{row.name:<28} {row.version or '-':>7}  {row.state or '-':<12} {row.reason}"
                )
        elif args.action == "load":
            config = read_config_file(args.config) if args.config else None
            check_load(
                repo,
                args.model,
                getattr(args, "model_repository", None),
                getattr(args, "model_config_name", "cpu") or None,
                config,
                f"--config {args.config}",
                getattr(args, "force", False),
            )
            for called in repo.calls_to_load(args.model, config, _local_configs(args)):
                if not repo.ready(called):
                    repo.load(called)
                    print(f"loaded {called} ({args.model} calls it through BLS)")
            repo.load(args.model, config)
            print(f"loaded {args.model} (versions {repo.versions(args.model)})")
        elif args.action == "unload":
            repo.unload(args.model, dependents=args.dependents)
            print(f"unloaded {args.model}" + (" and its dependents" if args.dependents else ""))
        elif args.action == "ready":
            ok = repo.ready(args.model, args.version)
            label = args.model + (f" version {args.version}" if args.version else "")
            print(f"{label}: {'READY' if ok else 'NOT READY'}")
            return 0 if ok else 1
    return 0


def _canary(args: argparse.Namespace) -> Canary | None:
    if args.no_canary:
        return None
    if args.probe_file:
        with np.load(args.probe_file, allow_pickle=False) as data:
            inputs = {name: data[name] for name in data.files}
        if not args.output:
            raise ValueError("--probe-file needs at least one --output to compare")
        return TensorCanary(inputs, args.output, args.atol, args.rtol)
    if args.min_cosine is not None:
        return EmbeddingCanary(DEFAULT_PROBE_TEXTS, args.min_cosine)
    return None  # the model's default canary, if any


def _print_report(report: RolloutReport) -> None:
    for step in report.steps:
        print(f"  {step}")
    for name, status in report.dependents.items():
        print(f"  ensemble {name}: {status}")
    print(
        f"{report.model}: now serving version {report.version} "
        f"(was {report.previous}) in {report.seconds:.1f} s"
    )


def rollout_command(args: argparse.Namespace) -> int:
    canary = _canary(args)
    with _repository(args) as repo:
        check_rollout_name(repo, args.model, getattr(args, "model_repository", None))
        if args.command == "rollout":
            report = rollout(
                repo, args.model, args.version, args.source_dir, canary, args.drain_timeout
            )
        else:
            report = rollback(repo, args.model, args.source_dir, canary, args.drain_timeout)
    _print_report(report)
    return 0


def configs_command(args: argparse.Namespace) -> int:
    """``configs use SET``: switch every loaded model to its config in SET, model by model
    (:func:`tritonrepo_client.control.config_sets.switch_config_set`); ``configs show``: the set
    each
    loaded model serves."""
    from tritonrepo_client.control.config_sets import (
        current_config_sets,
        probed_models,
        switch_config_set,
    )

    with (
        _repository(args) as repo,
        TritonConnection(args.url, args.protocol, args.timeout, tls_from_args(args)) as conn,
    ):
        loaded = sorted({r.name for r in repo.index() if r.state == "READY"})
        # Probe what serves: the named models, else every loaded model that declares a probe.
        served = args.models or probed_models(repo, conn)
        if args.action == "show":
            for model, config_set in current_config_sets(repo, loaded).items():
                print(f"{model:<28} {config_set}")
            return 0
        print(f"switching to the '{args.config_set}' configs from {args.repository}", flush=True)
        steps = switch_config_set(
            repo,
            conn,
            args.repository,
            args.config_set,
            served,
            force=args.force,
            progress=lambda line: print(f"  {line}", flush=True),
        )
        total = sum(s.seconds for s in steps)
        print(
            f"{len(steps)} models serve the '{args.config_set}' configs ({total:.0f} s); "
            f"{', '.join(served)} answer probes"
        )
    return 0


def heal_command(args: argparse.Namespace) -> int:
    """``heal``: one pass (exit 0 if every model serves afterwards, else 1), or ``--watch``:
    a pass every ``--interval`` seconds until SIGTERM/SIGINT (exit 0), printing what changed."""
    if args.interval <= 0:
        raise ValueError("--interval must be > 0 seconds")
    if args.metrics_port is not None and not args.watch:
        raise ValueError("--metrics-port needs --watch (one pass has nothing to publish)")
    with (
        _repository(args) as repo,
        TritonConnection(
            args.url, args.protocol, min(args.timeout, 60.0), tls_from_args(args)
        ) as conn,
    ):
        healer = Healer(
            repo, args.models or (), conn, backoff_s=args.backoff, only=bool(args.models)
        )
        if not args.watch:
            report = healer.heal_once()
            _print_heal(report, report.lines())
            return 0 if report.healthy else 1
        return _heal_watch(healer, args.interval, args.metrics_port, args.metrics_address)


def _print_heal(report: HealReport, lines: list[str]) -> None:
    """What a pass did, then ``ok``/``FAIL`` per served model."""
    for line in lines:
        print(line, flush=True)
    for model in report.probed:
        error = report.failing.get(model)
        print(f"FAIL {model}: {error}" if error else f"ok   {model}", flush=True)


def _heal_watch(
    healer: Healer, interval_s: float, metrics_port: int | None, metrics_address: str
) -> int:
    import signal
    import threading

    from tritonrepo_client.control.healing.metrics import HealMetrics

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    changes = ChangeLog()
    metrics = HealMetrics(healer.models)

    def on_report(report: HealReport) -> None:
        metrics.observe(report)
        for line in changes.lines(report):
            print(line, flush=True)

    def on_error(exc: Exception) -> None:
        metrics.failed_pass(exc)
        print(f"error: {exc}", file=sys.stderr, flush=True)

    if metrics_port is not None:
        metrics.track_loaded(healer)
        metrics.serve(metrics_port, metrics_address)
        print(f"metrics on http://{metrics_address}:{metrics_port}/metrics", flush=True)
    print(f"healing {', '.join(healer.models)} every {interval_s:g} s", flush=True)
    try:
        healer.watch(interval_s, stop, on_report, on_error)
    finally:
        metrics.close()
    return 0
