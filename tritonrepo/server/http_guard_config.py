"""The HTTP guard's nginx configuration: ``deploy/guard/nginx.conf.template`` rendered with its
settings (:class:`GuardSettings`) and file locations (:class:`GuardPaths`).

Three renderings exist: a run directory of :class:`tritonrepo.server.http_guard.HttpGuard` (this
host's Debian nginx + ``libnginx-mod-http-js``), and the two container ones committed to the tree
(:data:`DEPLOY_TARGETS`: ``docker/compose.yaml``'s ``http-guard`` service and the Kubernetes
sidecar, both the official ``nginx:1.27`` image). ``python -m tritonrepo.server.http_guard_config``
rewrites the committed ones; ``tests/server/test_http_guard.py`` checks they are current.

Both nginx builds put the njs module at ``/usr/lib/nginx/modules/ngx_http_js_module.so``
(Debian: package ``libnginx-mod-http-js``; nginx.org's image: ``nginx-module-njs``).
"""

from __future__ import annotations

import argparse
import os
import pwd
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from tritonrepo.paths import REPO_ROOT
from tritonrepo.server.queue_policy import CORE_CPU, CORE_GPU, QueuePolicy

GUARD_DIR = REPO_ROOT / "deploy" / "guard"
TEMPLATE = GUARD_DIR / "nginx.conf.template"
SCRIPT = GUARD_DIR / "kserve_guard.js"
OPENAI_SCRIPT = GUARD_DIR / "openai_embeddings.js"  # POST /v1/embeddings
ROUTES_SCRIPT = GUARD_DIR / "routes.js"  # canary and shadow routes, imported by SCRIPT too
SCRIPTS = (SCRIPT, OPENAI_SCRIPT, ROUTES_SCRIPT)
ROUTES_FILE = "routes.json"  # beside it: shadow.jsonl, decisions.jsonl
# The user nginx's workers run as when the master runs as root and the config names none
# (nginx's built-in default; `nginx -V` of Debian's package sets no other).
ROOT_WORKER_USER = "nobody"
NJS_MODULE = Path("/usr/lib/nginx/modules/ngx_http_js_module.so")

# Largest request body, bytes: Triton's own default input limit (--http-max-input-size, 64 MiB
# in later releases) and docker/nginx.conf's client_max_body_size; 64 texts of the encoder's
# 256 tokens or 32 encoded images are far below it.
DEFAULT_MAX_BODY_BYTES = 64 << 20
# Deepest JSON nesting, levels: a request object, its inputs array, an input object and up to
# 17 levels of nested `data` (rank-17 tensors). Triton's own later limit (PR #8172) is 100
# levels of `data`; njs' JSON.parse stops at 31.
DEFAULT_MAX_DEPTH = 20
# Largest input tensor (elements x datatype size), bytes: 1 GiB. A JSON input cannot reach it
# within a 64 MiB body (at most one element per byte, 8 bytes each = 512 MiB); a shared-memory
# input names its own region.
DEFAULT_MAX_TENSOR_BYTES = 1 << 30
# Largest JSON text the guard parses (a JSON body, or the JSON header of a binary request),
# bytes: njs' JSON.parse builds the whole value in the worker's memory and blocks its event
# loop while it does (about 0.1 s per MB here), so large tensors must come as binary data.
# 64 JSON texts of 64 KiB each (the tokenizer's limit per text) fit in 4 MiB.
DEFAULT_MAX_JSON_BYTES = 16 << 20
# Largest repository load request that carries the repository key header, bytes: a rollout's
# upload mode sends a model's files as base64 in JSON (4/3 of their size), so 2 GiB admits a
# model of 1.5 GiB. Such a body goes to a temporary file, not memory, and reaches Triton
# without the JSON checks (Triton checks the key before it reads the body).
DEFAULT_MAX_UPLOAD_BYTES = 2 << 30


def longest_queue_timeout_s(policies: tuple[QueuePolicy, ...] = (CORE_CPU, CORE_GPU)) -> int:
    """The longest a request may wait in a core model's queue, whole seconds: the largest
    ``default_timeout_microseconds`` of any priority level (bulk: 600 s)."""
    levels = [level for p in policies for level in (p.default, *p.per_level.values())]
    return max(level.timeout_us for level in levels) // 1_000_000


# Longest queue timeout an inference request goes on with, s: the core models' longest (the
# bulk level's 10 min), so no level's promise is cut short. The guard lowers a request's
# `timeout` parameter (µs) to it, or to the caller's Triton-Timeout-Ms header when lower.
DEFAULT_MAX_REQUEST_TIMEOUT_S = longest_queue_timeout_s()
# Time left after a request's last queue for its steps to run and the answer to start, s: a
# bulk batch of 64 texts takes about 1 s on 2 CPU cores; a minute covers a loaded GPU host.
RUN_ALLOWANCE_S = 60
# How long the guard waits for Triton's answer (proxy_read_timeout), s.
DEFAULT_UPSTREAM_TIMEOUT_S = DEFAULT_MAX_REQUEST_TIMEOUT_S + RUN_ALLOWANCE_S
# Each try of a health or readiness probe, ms (3 tries on new connections): Triton answers
# them from its HTTP thread without queueing, in under 0.15 s on a loaded 2-core host.
DEFAULT_PROBE_TIMEOUT_MS = 500
PROBE_TRIES = 3  # the probe upstream lists the server this many times


POSITIVE_SETTINGS = (
    "max_body_bytes",
    "max_depth",
    "max_tensor_bytes",
    "max_json_bytes",
    "max_upload_bytes",
    "max_request_timeout_s",
    "upstream_timeout_s",
    "probe_timeout_ms",
)


@dataclass(frozen=True)
class GuardSettings:
    """What the guard accepts and where it forwards.

    Attributes:
        listen: nginx ``listen`` address, ``host:port`` (``[::]:port`` for IPv6).
        upstream: Triton's HTTP endpoint, ``host:port``.
        max_body_bytes: largest request body, bytes (larger: 413).
        max_depth: deepest JSON nesting of a request body, levels (deeper: 400).
        max_tensor_bytes: largest input tensor, elements x datatype size, bytes (larger: 400).
        max_json_bytes: largest JSON text parsed (a JSON body or the JSON header of a binary
            request), bytes (larger: 413).
        max_upload_bytes: largest body of a repository load request carrying the repository
            key header (a rollout's upload mode), bytes (larger: 413).
        workers: nginx ``worker_processes`` (``auto`` = one per core).
        max_request_timeout_s: longest queue timeout an inference request is sent on with,
            seconds: the guard lowers a request's ``timeout`` parameter to it (and to a
            ``Triton-Timeout-Ms`` header), so Triton drops from its queues a request the guard
            has stopped waiting for.
        upstream_timeout_s: how long the guard waits for Triton's answer, seconds (nginx
            ``proxy_read_timeout``); more than ``max_request_timeout_s``.
        probe_timeout_ms: each of the 3 tries of a health or readiness request, ms.
        resolve: re-resolve the upstream's name while running (``server ... resolve``, nginx
            >= 1.27.3) with this DNS server; None = resolve once at start.
        metrics_port: the port of Triton's metrics endpoint on the guard's host, as its clients
            reach it (``GET /_guard/upstream`` says it: ``tritonrepo-client canary`` reads the
            figures of the server it routes through); None = the guard cannot tell.
    """

    listen: str
    upstream: str
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_depth: int = DEFAULT_MAX_DEPTH
    max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES
    max_json_bytes: int = DEFAULT_MAX_JSON_BYTES
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES
    workers: str = "auto"
    max_request_timeout_s: int = DEFAULT_MAX_REQUEST_TIMEOUT_S
    upstream_timeout_s: int = DEFAULT_UPSTREAM_TIMEOUT_S
    probe_timeout_ms: int = DEFAULT_PROBE_TIMEOUT_MS
    resolve: str | None = None
    metrics_port: int | None = None

    def __post_init__(self) -> None:
        for name in POSITIVE_SETTINGS:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
        if self.upstream_timeout_s <= self.max_request_timeout_s:
            raise ValueError(
                f"upstream_timeout_s ({self.upstream_timeout_s}) must be longer than "
                f"max_request_timeout_s ({self.max_request_timeout_s}): the guard would stop "
                "waiting for requests Triton still queues"
            )


@dataclass(frozen=True)
class GuardPaths:
    """Where the rendered nginx finds and writes its files (absolute paths, or ``stderr``)."""

    pid: str
    error_log: str
    access_log: str
    temp_dir: str
    njs_script: str
    njs_openai: str
    njs_routes: str
    routes_file: str
    njs_module: str = str(NJS_MODULE)

    @classmethod
    def run_dir(cls, run_dir: Path) -> GuardPaths:
        """Everything inside ``run_dir``: nginx.pid, error.log, refusals.log, temp/, the
        scripts."""
        run_dir = Path(run_dir).resolve()
        return cls(
            pid=str(run_dir / "nginx.pid"),
            error_log=str(run_dir / "error.log"),
            access_log=str(run_dir / "refusals.log"),
            temp_dir=str(run_dir / "temp"),
            njs_script=str(run_dir / SCRIPT.name),
            njs_openai=str(run_dir / OPENAI_SCRIPT.name),
            njs_routes=str(run_dir / ROUTES_SCRIPT.name),
            routes_file=str(run_dir / "routes" / ROUTES_FILE),
        )


def listen_address(host: str, port: int) -> str:
    """``host:port`` as nginx's ``listen`` and ``server`` take it (IPv6 in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def render(settings: GuardSettings, paths: GuardPaths) -> str:
    """The nginx.conf text.

    Raises:
        ValueError: a placeholder of the template has no value (template and renderer disagree).
    """
    resolve = " resolve" if settings.resolve else ""
    upstream = f"    server {settings.upstream}{resolve};"
    # The probe upstream: the same server PROBE_TRIES times (one try each), never marked down.
    probe = "\n".join([f"    server {settings.upstream}{resolve} max_fails=0;"] * PROBE_TRIES)
    if settings.resolve:
        resolver = f"    resolver {settings.resolve} valid=10s ipv6=off;\n"
        upstream = f"    zone triton 64k;\n{resolver}{upstream}"
        probe = f"    zone triton_probe 64k;\n{resolver}{probe}"
    values = {
        "NJS_MODULE": paths.njs_module,
        "WORKERS": settings.workers,
        "PID": paths.pid,
        "ERROR_LOG": paths.error_log,
        "ACCESS_LOG": paths.access_log,
        "TEMP": paths.temp_dir,
        "NJS_SCRIPT": paths.njs_script,
        "NJS_OPENAI": paths.njs_openai,
        "NJS_ROUTES": paths.njs_routes,
        "NJS_DIR": str(Path(paths.njs_script).parent),
        "ROUTES_FILE": paths.routes_file,
        "MAX_DEPTH": str(settings.max_depth),
        "MAX_TENSOR_BYTES": str(settings.max_tensor_bytes),
        "MAX_JSON_BYTES": str(settings.max_json_bytes),
        "MAX_BODY": str(settings.max_body_bytes),
        "MAX_UPLOAD": str(settings.max_upload_bytes),
        "UPSTREAM": upstream,
        "PROBE_UPSTREAM": probe,
        "UPSTREAM_TIMEOUT": str(settings.upstream_timeout_s),
        "MAX_REQUEST_TIMEOUT_US": str(settings.max_request_timeout_s * 1_000_000),
        "PROBE_TIMEOUT_MS": str(settings.probe_timeout_ms),
        "PROBE_TRIES": str(PROBE_TRIES),
        "LISTEN": settings.listen,
        "METRICS_PORT": str(settings.metrics_port or ""),
    }
    text = TEMPLATE.read_text()
    for name, value in values.items():
        text = text.replace(f"@@{name}@@", value)
    left = re.findall(r"@@[A-Z_]+@@", text)
    if left:
        raise ValueError(f"{TEMPLATE} has placeholders without a value: {', '.join(left)}")
    return text


def write_run_dir(settings: GuardSettings, run_dir: Path) -> Path:
    """Render into ``run_dir`` (created): nginx.conf, the njs scripts, temp/. Returns the
    conf."""
    run_dir = Path(run_dir)
    paths = GuardPaths.run_dir(run_dir)
    Path(paths.temp_dir).mkdir(parents=True, exist_ok=True)
    routes_dir = Path(paths.routes_file).parent
    routes_dir.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:  # nginx's workers run as nobody (its default), and write there
        worker = pwd.getpwnam(ROOT_WORKER_USER)
        os.chown(routes_dir, worker.pw_uid, worker.pw_gid)
    for script, path in zip(SCRIPTS, (paths.njs_script, paths.njs_openai, paths.njs_routes),
                            strict=True):  # fmt: skip
        shutil.copyfile(script, path)
    conf = run_dir / "nginx.conf"
    conf.write_text(render(settings, paths))
    return conf


# The container renderings: nginx.org's image, config and script mounted at /etc/nginx/guard/,
# pid and temp files on the writable /tmp, logs to the container's stderr/stdout.
CONTAINER_PATHS = GuardPaths(
    pid="/tmp/nginx.pid",
    error_log="stderr",
    access_log="/dev/stdout",
    temp_dir="/tmp",
    njs_script="/etc/nginx/guard/kserve_guard.js",
    njs_openai="/etc/nginx/guard/openai_embeddings.js",
    njs_routes="/etc/nginx/guard/routes.js",
    routes_file="/tmp/routes.json",
)
# docker/compose.yaml: Triton is the service `triton` (Docker's DNS at 127.0.0.11, re-resolved:
# a restarted triton container may get another address). Kubernetes: a sidecar of the pod.
DEPLOY_TARGETS: dict[Path, GuardSettings] = {
    REPO_ROOT / "docker" / "guard.nginx.conf": GuardSettings(
        listen="8000",
        upstream="triton:8000",
        resolve="127.0.0.11",
        workers="2",
        metrics_port=8002,
    ),
    REPO_ROOT / "deploy" / "kubernetes" / "base" / "guard" / "nginx.conf": GuardSettings(
        listen="8080", upstream="127.0.0.1:8000", workers="2", metrics_port=8002
    ),
}
# Copies of the scripts where the deployments read them (kustomize reads files below its folder).
SCRIPT_COPIES = {
    REPO_ROOT / "deploy" / "kubernetes" / "base" / "guard" / script.name: script
    for script in SCRIPTS
}


def deploy_files() -> dict[Path, str]:
    """Every committed rendering and script copy, with the text it must have."""
    files = {path: render(settings, CONTAINER_PATHS) for path, settings in DEPLOY_TARGETS.items()}
    files.update({path: script.read_text() for path, script in SCRIPT_COPIES.items()})
    return files


def main(argv: list[str] | None = None) -> int:
    """Rewrite the committed renderings (after changing the template, script or settings)."""
    argparse.ArgumentParser(description=main.__doc__).parse_args(argv)
    for path, text in deploy_files().items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
            print(f"wrote {path.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
