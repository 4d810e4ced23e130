"""``tritonrepo-serve`` (``make serve``): run the embedded server until interrupted.

Options, the repository key (:mod:`tritonrepo.server.repository_key`) and the lifecycle of one
:class:`tritonrepo.server.launcher.TritonServer`; every failure is one line on stderr and exit code
1. By default HTTP is served through the HTTP guard (nginx + njs:
:mod:`tritonrepo.server.http_guard`), gRPC through the gRPC guard (nginx, a bound on request size:
:mod:`tritonrepo.server.grpc_guard`) and a ``tritonserver`` that dies is restarted
(:mod:`tritonrepo.server.restart`); the restart lines go to stderr, and when the crash-loop bound is
reached ``serve`` exits 1 saying so.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from tritonrepo.paths import BUILD_DIR, MODEL_REPOSITORY, REPO_ROOT
from tritonrepo.server import repository_key
from tritonrepo.server.launcher import (
    GrpcServerTls,
    LaunchError,
    ServerOptions,
    TritonServer,
)
from tritonrepo.server.options import GRPC_MAX_REQUEST_BYTES, default_models, is_loopback

# Printed when gRPC is reachable from other machines: what one request does to 2.51 there.
GRPC_EXPOSED_WARNING = (
    "warning: gRPC is reachable from other machines on {address}. On Triton 2.51 one gRPC "
    "request asking for a classification (class_count) of a BYTES output ends the server "
    "(SIGFPE, division by zero: CVE-2025-23321), and nothing in front of gRPC can refuse it; "
    "the launcher restarts the server (about 10 s without service). Fixed in Triton 2.59.1 "
    "(NGC 25.07); the production container (NGC 26.05) has the fix. Give clients you do not "
    "trust HTTP (through the HTTP guard) instead."
)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options of ``python -m tritonrepo.server.serve`` (``tritonrepo-serve``)."""
    p = argparse.ArgumentParser(
        prog="tritonrepo-serve",
        description="Run the embedded tritonserver on this model repository until interrupted.",
    )
    p.add_argument("--model-repository", type=Path, default=MODEL_REPOSITORY)
    p.add_argument(
        "--model",
        dest="models",
        action="append",
        help="model to load at start (repeatable; default: every model no other one uses that "
        "declares a health probe: "
        f"{', '.join(default_models())}; tritonrepo.server.options.default_models)",
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind HTTP and metrics to (default 127.0.0.1); gRPC too only with "
        "--expose-grpc, else gRPC stays on 127.0.0.1",
    )
    p.add_argument(
        "--expose",
        action="store_true",
        help="bind HTTP and metrics to 0.0.0.0 (all interfaces) instead of --host; gRPC stays "
        "on 127.0.0.1 unless --expose-grpc",
    )
    p.add_argument(
        "--expose-grpc",
        action="store_true",
        help="bind gRPC to the same address as HTTP (--expose or --host). On Triton 2.51 one "
        "gRPC classification request of a BYTES output ends the server (SIGFPE; fixed in "
        "2.59.1 / NGC 25.07), and nothing can refuse it on gRPC",
    )
    p.add_argument("--http-port", type=int, default=8000)
    p.add_argument("--grpc-port", type=int, default=8001)
    p.add_argument("--metrics-port", type=int, default=8002)
    p.add_argument(
        "--model-config-name",
        default="cpu",
        help="configs/<name>.pbtxt to use for every model ('' = config.pbtxt)",
    )
    p.add_argument("--log-file", type=Path, default=BUILD_DIR / "tritonserver.log")
    p.add_argument("--log-verbose", type=int, default=0)
    p.add_argument("--startup-timeout", type=float, default=180.0, help="seconds")
    p.add_argument(
        "--exit-timeout",
        type=int,
        default=30,
        help="seconds Triton waits on stop for in-flight requests and open HTTP connections "
        "(--exit-timeout-secs; default 30); it is killed 10 s after that",
    )
    p.add_argument(
        "--no-restart",
        action="store_true",
        help="do not restart a tritonserver that dies (by default it is restarted on the same "
        "ports with exponential backoff from 1 s to 30 s, up to --restart-limit times in 10 "
        "minutes)",
    )
    p.add_argument(
        "--restart-limit",
        type=int,
        default=5,
        help="restarts allowed within 10 minutes; the next crash is a crash loop and serve "
        "exits 1 (default 5)",
    )
    p.add_argument(
        "--no-http-guard",
        action="store_true",
        help="serve HTTP from tritonserver directly instead of through the HTTP guard (nginx + "
        "njs, which refuses requests that end Triton 2.51); only on a loopback address unless "
        "--insecure",
    )
    p.add_argument(
        "--no-grpc-guard",
        action="store_true",
        help="serve gRPC from tritonserver directly instead of through the gRPC guard (nginx, "
        f"which refuses calls that send more than {GRPC_MAX_REQUEST_BYTES >> 20} MiB: 2.51 "
        "takes up to 2 GB and keeps the memory); only on a loopback address unless --insecure",
    )
    p.add_argument(
        "--heal-interval",
        type=float,
        default=10.0,
        help="seconds between self-healing passes: probe every model and reload a step whose "
        "Python stub process died (default 10; 0 = off)",
    )
    p.add_argument(
        "--heal-metrics-port",
        type=int,
        default=8003,
        help="port of the self-healing supervisor's Prometheus metrics (model ready, step "
        "restarts; default 8003; 0 = off)",
    )
    p.add_argument("--grpc-tls-cert", type=Path, help="PEM certificate: serve gRPC over TLS")
    p.add_argument("--grpc-tls-key", type=Path, help="PEM private key of --grpc-tls-cert")
    p.add_argument(
        "--grpc-tls-client-ca",
        type=Path,
        help="PEM CA of client certificates: require mutual TLS on gRPC",
    )
    p.add_argument(
        "--insecure",
        action="store_true",
        help="allow --no-repository-key, --no-http-guard or --no-grpc-guard on a non-loopback "
        "address (anyone who reaches the ports may load models, register shared memory and "
        "change logging, end the server with one request, or fill its memory)",
    )
    keys = p.add_mutually_exclusive_group()
    keys.add_argument(
        "--repository-key-file",
        type=Path,
        help="file holding the key that guards load/unload/index (default: "
        f"${repository_key.ENV_KEY}, ${repository_key.ENV_KEY_FILE}, or a new random key "
        f"in {repository_key.DEFAULT_KEY_FILE.relative_to(REPO_ROOT)})",
    )
    keys.add_argument(
        "--no-repository-key",
        action="store_true",
        help="leave the admin APIs (model repository, shared memory, logging, trace) open to "
        "anyone who reaches the ports (unsafe)",
    )
    return p.parse_args(argv)


def exposure_problem(
    host: str,
    open_admin: bool,
    insecure: bool,
    unguarded: bool = False,
    grpc_host: str = "127.0.0.1",
    grpc_unguarded: bool = False,
) -> str | None:
    """Why serving on ``host`` (gRPC on ``grpc_host``) must be refused, or None: the admin APIs
    without a key, HTTP without the HTTP guard, or gRPC without the gRPC guard, on an address
    other machines can reach, unless ``insecure``."""
    if grpc_unguarded and not insecure and not is_loopback(grpc_host):
        return (
            f"refusing to serve gRPC on {grpc_host} with --no-grpc-guard: one call may send up "
            "to 2 GB, which Triton 2.51 keeps in memory; drop --no-grpc-guard, or add --insecure"
        )
    if insecure or is_loopback(host):
        return None
    if open_admin:
        return (
            f"refusing to serve on {host} with --no-repository-key: anyone who reaches the "
            "ports could load models, register shared memory and change logging; drop "
            "--no-repository-key (the key locks those APIs), or add --insecure"
        )
    if unguarded:
        return (
            f"refusing to serve on {host} with --no-http-guard: one request of about 200 bytes "
            "can end Triton 2.51 (see docs/operations/recovery.md); drop --no-http-guard, or "
            "add --insecure"
        )
    return None


def launcher_key(args: argparse.Namespace) -> tuple[str | None, str]:
    """The repository key for ``main`` and a sentence saying where it came from.

    Raises:
        repository_key.RepositoryKeyError: a named key file cannot be read.
    """
    if args.no_repository_key:
        return None, "model-repository API (load/unload/index) is OPEN: no key"
    found = repository_key.find_key(args.repository_key_file, repository_key.DEFAULT_KEY_FILE)
    if found:
        return found[0], f"model-repository API key from {found[1]}"
    key = repository_key.create_key_file()
    return key, f"model-repository API key written to {repository_key.DEFAULT_KEY_FILE}"


def main(argv: Sequence[str] | None = None) -> int:
    """Serve until SIGINT/SIGTERM; exit 1 with a one-line reason if the server cannot start."""
    args = parse_args(argv)
    host = "0.0.0.0" if args.expose else args.host
    grpc_host = host if args.expose_grpc or is_loopback(host) else "127.0.0.1"
    problem = exposure_problem(
        host,
        args.no_repository_key,
        args.insecure,
        args.no_http_guard,
        grpc_host=grpc_host,
        grpc_unguarded=args.no_grpc_guard,
    )
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 1
    if args.exit_timeout < 0 or args.restart_limit < 0:
        print("error: --exit-timeout and --restart-limit must be >= 0", file=sys.stderr)
        return 1
    if (args.grpc_tls_cert is None) != (args.grpc_tls_key is None) or (
        args.grpc_tls_client_ca and args.grpc_tls_cert is None
    ):
        print("error: gRPC TLS needs both --grpc-tls-cert and --grpc-tls-key", file=sys.stderr)
        return 1
    if args.heal_interval < 0:
        print("error: --heal-interval must be >= 0 seconds (0 = off)", file=sys.stderr)
        return 1
    tls = (
        GrpcServerTls(args.grpc_tls_cert, args.grpc_tls_key, args.grpc_tls_client_ca)
        if args.grpc_tls_cert
        else None
    )
    try:
        key, key_note = launcher_key(args)
    except repository_key.RepositoryKeyError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    options = ServerOptions(
        model_repository=args.model_repository,
        models=tuple(args.models or default_models(args.model_repository)),
        host=host,
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        metrics_port=args.metrics_port,
        model_config_name=args.model_config_name or None,
        log_file=args.log_file,
        log_verbose=args.log_verbose,
        startup_timeout_s=args.startup_timeout,
        repository_key=key,
        grpc_tls=tls,
        heal_interval_s=args.heal_interval or None,
        heal_metrics_port=args.heal_metrics_port or None,
        exit_timeout_s=args.exit_timeout,
        restart_on_crash=not args.no_restart,
        restart_limit=args.restart_limit,
        http_guard=not args.no_http_guard,
        expose_grpc=args.expose_grpc,
        grpc_guard=not args.no_grpc_guard,
    )
    server = TritonServer(options)
    print(
        f"starting tritonserver (models: {', '.join(options.models)}; log: {options.log_file})",
        flush=True,
    )
    try:
        server.start()
    except LaunchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        server.stop()
        return 130
    print(key_note, flush=True)
    if not is_loopback(host):
        grpc = f", gRPC :{options.grpc_port}" if options.grpc_host == host else ""
        print(
            f"reachable from other machines on {host}: HTTP :{options.http_port}{grpc} (health, "
            f"metadata, inference, configs and statistics without a key), metrics "
            f":{options.metrics_port} (no key)"
            + ("" if grpc else f"; gRPC only on {options.grpc_url} (--expose-grpc to expose it)"),
            flush=True,
        )
    if not is_loopback(options.grpc_host):
        address = f"{options.grpc_host}:{options.grpc_port}"
        print(GRPC_EXPOSED_WARNING.format(address=address), file=sys.stderr, flush=True)
    if server.grpc_guard is not None:
        print(
            f"gRPC is behind the gRPC guard (nginx) on {options.grpc_host}:{options.grpc_port}: "
            f"calls sending more than {options.grpc_max_request_bytes} bytes are refused "
            f"(RESOURCE_EXHAUSTED); forwarding to tritonserver on "
            f"127.0.0.1:{server.triton_grpc_port} (--no-grpc-guard = off)",
            flush=True,
        )
    if options.http_guard:
        print(
            f"HTTP is behind the HTTP guard (nginx + njs) on {host}:{options.http_port}, "
            f"forwarding to tritonserver on {server.triton_http_url} (--no-http-guard = off)",
            flush=True,
        )
    if options.heal_interval_s:
        print(
            f"self-healing: every {options.heal_interval_s:g} s, a probe per model; a step whose "
            "stub died is reloaded and logged as 'heal: ...' (--heal-interval 0 = off)"
            + (f"; its metrics: {options.heal_metrics_url}" if options.heal_metrics_url else ""),
            flush=True,
        )
    if options.restart_on_crash:
        print(
            f"restart on crash: a tritonserver that dies is restarted on the same ports (up to "
            f"{options.restart_limit} times in {options.restart_window_s:g} s), logged as "
            "'tritonserver died: ...' (--no-restart = off)",
            flush=True,
        )
    print(
        f"ready: HTTP {options.http_url}  gRPC {options.grpc_url}  "
        f"metrics {options.metrics_url}  (Ctrl-C to stop)",
        flush=True,
    )
    return serve_until_stopped(server)


def serve_until_stopped(server: TritonServer) -> int:
    """Wait for SIGINT/SIGTERM (exit 0 after a clean stop) or for the server to be down for
    good (exit 1: it died without restarts, or restarting it reached the crash-loop bound)."""
    options = server.options
    stopping = False

    def _stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    down = None
    try:
        while not stopping and down is None:
            time.sleep(0.5)
            down = server.down_reason()
    finally:
        if down is None:
            print(
                f"stopping tritonserver (in-flight requests and open HTTP connections get up to "
                f"{options.exit_timeout_s} s; killed after {options.stop_bound_s:g} s)",
                flush=True,
            )
        started = time.monotonic()
        code = server.stop()
    if down is not None:
        print(f"error: {down}", file=sys.stderr)
        return 1
    print(
        f"tritonserver stopped in {time.monotonic() - started:.1f} s (exit code {code})",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
