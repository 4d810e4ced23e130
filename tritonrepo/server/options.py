"""How the launcher runs a server (:class:`ServerOptions`), the models it serves by default and
the config sets that need a CUDA memory pool."""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tritonrepo.paths import BUILD_DIR, MODEL_REPOSITORY
from tritonrepo.server import repository_key
from tritonrepo_format.config_sets import gpu_pool_sizes

# Config sets that put Python-backend steps on the GPU, with the CUDA memory pool they need per
# GPU (the table of config sets, ``ConfigSet.cuda_pool_bytes``): the Python backend moves GPU
# tensors between its stub processes and the server through this pool, and a 512 x 256 x 384
# FP16 batch of token embeddings alone is 100 MB (Triton's default pool is 64 MiB).
GPU_CONFIG_SETS = gpu_pool_sizes()
# Seconds past Triton's exit timeout before the launcher kills it: after the timeout 2.51 still
# stops gRPC and metrics and exits (measured: under 2 s on two cores; the margin is generous).
STOP_MARGIN_S = 10.0
# Most bytes one gRPC call may send through the gRPC guard: the HTTP guard's body limit (Triton's
# own --http-max-input-size default in later releases), so both protocols take the same requests.
GRPC_MAX_REQUEST_BYTES = 64 << 20


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) only accepts connections from this
    machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


@dataclass(frozen=True)
class GrpcServerTls:
    """TLS on the gRPC endpoint (Triton's ``--grpc-use-ssl``): PEM files.

    Attributes:
        cert: the server's certificate (``--grpc-server-cert``).
        key: its private key (``--grpc-server-key``).
        client_ca: CA of the client certificates to require (``--grpc-root-cert`` and
            ``--grpc-use-ssl-mutual``); None = any client may connect over TLS.
    """

    cert: Path
    key: Path
    client_ca: Path | None = None


@dataclass
class ServerOptions:
    """How to run the server.

    Ports are TCP ports; ``startup_timeout_s`` and ``stop_timeout_s`` are seconds.
    ``host`` is the address HTTP and metrics bind to: 127.0.0.1 unless exposed on purpose.
    gRPC binds to it too only when it is a loopback address or ``expose_grpc`` is set; otherwise
    to 127.0.0.1 (:attr:`grpc_host`): on 2.51 one gRPC classification request of a BYTES
    output ends the server, and no guard can refuse it on gRPC.
    ``repository_key``: when set, the model-repository API (index, load, unload) answers only
    requests carrying it (:mod:`tritonrepo.server.repository_key`); inference stays open.
    ``cuda_memory_pool_bytes``: CUDA memory pool per visible GPU, in bytes, through which the
    Python backend passes GPU tensors between processes (None: Triton's 64 MiB default, or
    the size in ``GPU_CONFIG_SETS`` when ``model_config_name`` is one of them).
    ``grpc_tls``: serve gRPC over TLS (:class:`GrpcServerTls`); HTTP TLS ends at a reverse proxy.
    ``heal_interval_s``: seconds between the supervisor's passes (probe every model, reload the
    steps whose stubs died: :mod:`tritonrepo_client.control.healing.healer`); None or 0 = no
    supervisor. ``heal_backoff_s``: seconds before the supervisor retries a step whose reload failed
    (doubled each time, 3 attempts).
    ``heal_metrics_port``: TCP port on ``host`` where the supervisor serves its Prometheus
    metrics (``tritonrepo_model_ready``, ``tritonrepo_step_restarts_total``,
    ``tritonrepo_server_restarts_total``: :mod:`tritonrepo_client.control.healing.metrics`); None =
    not served. ``exit_timeout_s``: Triton's ``--exit-timeout-secs``, whole seconds: on SIGTERM,
    2.51 first waits for its open HTTP connections to close (idle keep-alive ones included), then
    for the models to unload, both out of this one budget (server ``src/main.cc``,
    ``http_server.cc``
    ``HTTPServer::Stop``, core ``InferenceServer::Stop``, release r24.10).
    ``stop_timeout_s``: seconds :meth:`TritonServer.stop` waits after SIGTERM before SIGKILL;
    None = ``exit_timeout_s + STOP_MARGIN_S``, so Triton's own exit timeout always runs out
    first (:attr:`stop_bound_s`).
    ``restart_on_crash``: restart a ``tritonserver`` that exits while not being stopped (a
    crash such as SIGFPE or SIGSEGV, or a kill), on the same ports with the same command line,
    and load again the models that were served (:mod:`tritonrepo.server.restart`).
    ``restart_backoff_s``: seconds before the first restart; doubled for each further crash
    within ``restart_window_s``, capped at ``restart_max_backoff_s``.
    ``restart_limit``: restarts allowed within ``restart_window_s`` seconds; the next crash
    inside the window is a crash loop and the launcher gives up (``TritonServer.failure``).
    ``http_guard``: put the HTTP endpoint behind the HTTP guard (nginx + njs,
    :mod:`tritonrepo.server.http_guard`): it listens on ``host:http_port`` and forwards to
    ``tritonserver``, whose own HTTP endpoint then binds to 127.0.0.1 on a private free port.
    ``http_url`` is the guard's; gRPC and metrics are unchanged.
    ``grpc_guard``: put the gRPC endpoint behind the gRPC guard (nginx ``grpc_pass``,
    :mod:`tritonrepo.server.grpc_guard`): it listens on ``grpc_host:grpc_port``, refuses a call
    that sends more than ``grpc_max_request_bytes`` bytes (``RESOURCE_EXHAUSTED``), ends TLS
    when ``grpc_tls`` is set, and forwards to ``tritonserver``'s gRPC endpoint on 127.0.0.1 on a
    private free port.
    ``models``: the models to serve; empty = those of ``model_repository`` served by default
    (:func:`default_models`).
    """

    model_repository: Path = MODEL_REPOSITORY
    models: Sequence[str] = ()
    host: str = "127.0.0.1"
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    model_config_name: str | None = "cpu"
    log_file: Path = BUILD_DIR / "tritonserver.log"
    repository_key: str | None = None
    log_verbose: int = 0
    startup_timeout_s: float = 180.0
    stop_timeout_s: float | None = None
    exit_timeout_s: int = 30
    extra_args: Sequence[str] = field(default_factory=tuple)
    cuda_memory_pool_bytes: int | None = None
    grpc_tls: GrpcServerTls | None = None
    heal_interval_s: float | None = None
    heal_backoff_s: float = 30.0
    heal_metrics_port: int | None = None
    restart_on_crash: bool = False
    restart_backoff_s: float = 1.0
    restart_max_backoff_s: float = 30.0
    restart_limit: int = 5
    restart_window_s: float = 600.0
    http_guard: bool = False
    expose_grpc: bool = False
    grpc_guard: bool = False
    grpc_max_request_bytes: int = GRPC_MAX_REQUEST_BYTES

    def __post_init__(self) -> None:
        if not self.models:
            self.models = default_models(self.model_repository)

    @property
    def given_ports(self) -> tuple[int | None, ...]:
        """The ports this server was given (HTTP, gRPC, metrics, the supervisor's metrics): a
        private port picked for tritonserver behind a guard must be none of them."""
        return (self.http_port, self.grpc_port, self.metrics_port, self.heal_metrics_port)

    @property
    def load_models(self) -> tuple[str, ...]:
        """What ``tritonserver`` loads at start (``--load-model``): the models a served model
        calls through BLS (declared in its config, ``tritonrepo_calls``:
        :func:`tritonrepo_client.control.model_calls.load_closure`, read from
        ``model_repository`` with ``model_config_name``), each before its caller, then
        ``models``. A config that does not parse adds nothing here; the preflight names it."""
        from tritonrepo_client.control.model_calls import disk_configs, load_closure
        from tritonrepo_format.configs import ConfigParseError

        served = tuple(self.models)
        try:
            called = load_closure(
                served, disk_configs(Path(self.model_repository), self.model_config_name)
            )
        except ConfigParseError:
            called = ()
        return (*called, *served)

    @property
    def grpc_host(self) -> str:
        """Address the gRPC endpoint (or the gRPC guard) binds to: ``host`` when it is a
        loopback address or ``expose_grpc`` is set, else 127.0.0.1."""
        return self.host if self.expose_grpc or is_loopback(self.host) else "127.0.0.1"

    @property
    def stop_bound_s(self) -> float:
        """Seconds :meth:`TritonServer.stop` may take at most after SIGTERM: ``stop_timeout_s``,
        or Triton's exit timeout plus ``STOP_MARGIN_S`` (after which it is killed)."""
        if self.stop_timeout_s is not None:
            return self.stop_timeout_s
        return self.exit_timeout_s + STOP_MARGIN_S

    @property
    def client_host(self) -> str:
        """Address a local client connects to (0.0.0.0 / :: are not connectable)."""
        return "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host

    @property
    def repository_headers(self) -> dict[str, str]:
        """HTTP headers for the model-repository API (empty when unrestricted)."""
        return repository_key.headers(self.repository_key, "http")

    def url(self, protocol: str) -> str:
        """``host:port`` of the ``"http"`` or ``"grpc"`` endpoint."""
        return self.http_url if protocol == "http" else self.grpc_url

    @property
    def http_url(self) -> str:
        """``host:port`` of the HTTP endpoint, as tritonclient takes it."""
        return f"{self.client_host}:{self.http_port}"

    @property
    def metrics_url(self) -> str:
        """``http://host:port/metrics``: the Prometheus endpoint."""
        return f"http://{self.client_host}:{self.metrics_port}/metrics"

    @property
    def heal_metrics_url(self) -> str | None:
        """``http://host:port/metrics`` of the supervisor, or None when not served."""
        if self.heal_metrics_port is None:
            return None
        return f"http://{self.client_host}:{self.heal_metrics_port}/metrics"

    @property
    def grpc_url(self) -> str:
        """``host:port`` of the gRPC endpoint, as tritonclient takes it."""
        host = self.grpc_host
        return f"{'127.0.0.1' if host in ('0.0.0.0', '::', '') else host}:{self.grpc_port}"


def default_models(repository: Path = MODEL_REPOSITORY) -> tuple[str, ...]:
    """What ``make serve`` loads without ``--model``: the top-level models of ``repository``
    (neither an ensemble's step nor called through BLS) that declare their health probe
    (parameter ``tritonrepo_probe``; a described pipeline's comes from its description), by
    name (:func:`tritonrepo_format.roles.served_models`). So a team's pipeline is
    served next to the shipped ones without listing them; the container's entrypoint
    (``docker/entrypoint.sh``) asks this list, and ``tritonrepo-client health`` probes every
    loaded model that declares a probe."""
    from tritonrepo_format.roles import served_models

    return served_models(repository)
