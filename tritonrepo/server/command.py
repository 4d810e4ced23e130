"""The ``tritonserver`` command line the launcher runs, and the checks before it starts it.

:func:`tritonserver_command` is the whole command line of one server (the same for each restart
of it: ports, ``--model-config-name``, ``--load-model`` list, repository key); :func:`preflight`
refuses to start on a numpy the Python-backend stubs cannot serve with
(:mod:`tritonrepo.server.stub_numpy`), a missing repository or model, a failing artifact check
(:mod:`tritonrepo.server.preflight`) or a port in use. Used by
:class:`tritonrepo.server.launcher.TritonServer`.
"""

from __future__ import annotations

import socket
from collections.abc import Collection
from pathlib import Path

from tritonrepo.server import preflight as artifact_preflight
from tritonrepo.server import repository_key, stub_numpy
from tritonrepo.server.embedded_server import LaunchError, tritonserver_binary, visible_gpus
from tritonrepo.server.options import GPU_CONFIG_SETS, ServerOptions
from tritonrepo_client.control.model_calls import callers, disk_configs

# The latency quantiles Triton keeps per model, as quantile:rank-error pairs: p50 and p99, the two
# the alert and the dashboard read (deploy/prometheus/alerts.yml). Triton's default keeps five
# (0.5, 0.9, 0.95, 0.99, 0.999; core metric_model_reporter.h), updated under a lock for each of
# five latency summaries at every request. Measured on 2 cores (click_lightgbm's one-step model,
# c=16 through the HTTP guard, wrk, 6 s runs on one server): with the default five, 5,150-5,800
# requests/s and a p99 that grew from 7 to 18 ms over three runs; with these two, 6,050-6,100/s
# and 5.6-5.9 ms; without summaries, 6,380/s and 4.8 ms.
SUMMARY_QUANTILES = "0.5:0.05,0.99:0.001"


def check_port_free(host: str, port: int, what: str) -> None:
    """Raise :class:`LaunchError` if ``host:port`` cannot be bound (``what`` names the endpoint)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise LaunchError(
                f"{what} port {port} on {host} is already in use ({exc.strerror}); "
                f"stop the other process or choose another port"
            ) from None


def free_port(host: str = "127.0.0.1", avoid: Collection[int | None] = ()) -> int:
    """A TCP port that is free on ``host`` right now (for tests and parallel servers), none of
    ``avoid``: the ports a server was given but may not have bound yet (its metrics, its
    supervisor's), which the system could otherwise hand out again."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = sock.getsockname()[1]
        if port not in avoid:
            return port


def tritonserver_command(
    o: ServerOptions,
    backend_directory: Path,
    shm_prefix: str,
    http_port: int,
    grpc_port: int | None = None,
) -> list[str]:
    """The full ``tritonserver`` command line for ``o``.

    Args:
        backend_directory: ``--backend-directory`` (``embedded_server.assemble_backend_directory``).
        shm_prefix: the Python backend's shared-memory region prefix of this server.
        http_port: the port of tritonserver's own HTTP endpoint (a private one on 127.0.0.1
            behind the HTTP guard, else ``o.http_port``).
        grpc_port: the port of tritonserver's own gRPC endpoint: a private one on 127.0.0.1
            behind the gRPC guard (which then also ends TLS), else ``o.grpc_port`` on
            ``o.grpc_host``.
    """
    grpc_guarded = o.grpc_guard
    grpc_port = o.grpc_port if grpc_port is None else grpc_port
    cmd = [
        str(tritonserver_binary()),
        f"--model-repository={Path(o.model_repository).resolve()}",
        f"--backend-directory={backend_directory}",
        "--model-control-mode=explicit",
        f"--http-address={'127.0.0.1' if o.http_guard else o.host}",
        f"--http-port={http_port}",
        f"--grpc-address={'127.0.0.1' if grpc_guarded else o.grpc_host}",
        f"--grpc-port={grpc_port}",
        "--allow-metrics=true",
        f"--metrics-address={o.host}",
        f"--metrics-port={o.metrics_port}",
        "--allow-gpu-metrics=false",
        # Latency quantiles per model (nv_inference_request_summary_us{quantile="0.99"} and
        # the queue/compute summaries), which the p99 alert and the dashboard read: only the
        # p50 and p99 they read (SUMMARY_QUANTILES says why).
        "--metrics-config=summary_latencies=true",
        f"--metrics-config=summary_quantiles={SUMMARY_QUANTILES}",
        "--exit-on-error=false",
        f"--exit-timeout-secs={o.exit_timeout_s}",
        # Readiness is judged per served model with a probe (tritonrepo_client.control.health): a
        # strict server turns not-ready when any unrelated model fails to load.
        "--strict-readiness=false",
        f"--log-verbose={o.log_verbose}",
        f"--backend-config=python,shm-region-prefix-name={shm_prefix}",
    ]
    if o.repository_key:
        restriction = repository_key.restriction(o.repository_key)
        cmd += [
            f"--http-restricted-api={restriction}",
            f"--grpc-restricted-protocol={restriction}",
        ]
    if o.grpc_tls and not grpc_guarded:
        cmd += [
            "--grpc-use-ssl=true",
            f"--grpc-server-cert={Path(o.grpc_tls.cert).resolve()}",
            f"--grpc-server-key={Path(o.grpc_tls.key).resolve()}",
        ]
        if o.grpc_tls.client_ca:
            cmd += [
                f"--grpc-root-cert={Path(o.grpc_tls.client_ca).resolve()}",
                "--grpc-use-ssl-mutual=true",
            ]
    if o.model_config_name:
        cmd.append(f"--model-config-name={o.model_config_name}")
    pool = o.cuda_memory_pool_bytes
    if pool is None:
        pool = GPU_CONFIG_SETS.get(o.model_config_name or "")
    if pool:
        cmd += [f"--cuda-memory-pool-byte-size={gpu}:{pool}" for gpu in visible_gpus()]
    cmd += [f"--load-model={m}" for m in o.load_models]
    cmd += list(o.extra_args)
    return cmd


def preflight(o: ServerOptions) -> None:
    """The checks before starting a server for ``o``.

    Raises:
        LaunchError: the Python-backend stubs would import a numpy they cannot serve with
            (:mod:`tritonrepo.server.stub_numpy`), the repository or a model is missing, an
            artifact check fails (the first error, :mod:`tritonrepo.server.preflight`), or a
            port (HTTP, gRPC, metrics, the supervisor's) is in use on ``o.host``.
    """
    numpy = stub_numpy.check()
    if numpy.level == "error":
        raise LaunchError(f"preflight: {numpy.message}")
    repo = Path(o.model_repository)
    if not repo.is_dir():
        raise LaunchError(f"model repository {repo} does not exist")
    load = o.load_models
    for name in load:
        if not (repo / name).is_dir():
            called = ""
            if name not in o.models:
                by = callers(name, o.models, disk_configs(repo, o.model_config_name))
                called = f" (called through BLS by {', '.join(by)})"
            raise LaunchError(f"model '{name}'{called} is not in the model repository {repo}")
    errors = [
        f for f in artifact_preflight.run(repo, load, o.model_config_name) if f.level == "error"
    ]
    if errors:
        more = (
            f" (and {len(errors) - 1} more: python -m tritonrepo.server.preflight)"
            if errors[1:]
            else ""
        )
        raise LaunchError(f"preflight: model '{errors[0].model}': {errors[0].message}{more}")
    ports = [("HTTP", o.host, o.http_port), ("gRPC", o.grpc_host, o.grpc_port)]
    ports.append(("metrics", o.host, o.metrics_port))
    if o.heal_interval_s and o.heal_metrics_port is not None:
        ports.append(("self-healing metrics", o.host, o.heal_metrics_port))
    for what, host, port in ports:
        check_port_free(host, port, what)


__all__ = ["check_port_free", "free_port", "preflight", "tritonserver_command"]
