"""docker/compose.yaml (PyYAML) and docker/entrypoint.sh (run with stand-ins for ``python`` and
``tritonserver``), checked without a Docker engine: GPU reservation, shared memory, loopback-only
ports, read-only repository, key from a secret, explicit model control, a health check that
really probes, and what the entrypoint runs before the server.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.dockerfile_steps import COMPOSE_FILE, DOCKER_DIR, ENTRYPOINT, parse_dockerfile
from tritonrepo.paths import REPO_ROOT
from tritonrepo.server.command import tritonserver_command
from tritonrepo.server.options import ServerOptions, default_models
from tritonrepo_client.cli import app as cli

# --- docker/compose.yaml ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict:
    """docker/compose.yaml, parsed."""
    return yaml.safe_load(COMPOSE_FILE.read_text())


@pytest.fixture(scope="module")
def triton(compose: dict) -> dict:
    """The serving service of docker/compose.yaml."""
    return compose["services"]["triton"]


def _size_bytes(size: str | int) -> int:
    """A compose byte size (``1gb``, ``512m``, ``1073741824``) in bytes."""
    match = re.fullmatch(r"(\d+)\s*([kmg]?)b?", str(size).strip().lower())
    assert match, f"unreadable size {size!r}"
    return int(match[1]) * 1024 ** " kmg".index(match[2] or " ")


def _gpu_reserved(service: dict) -> bool:
    devices = service.get("deploy", {}).get("resources", {}).get("reservations", {})
    return any("gpu" in d.get("capabilities", []) for d in devices.get("devices", []))


def test_compose_reserves_a_gpu(triton: dict) -> None:
    """deploy.resources.reservations.devices asks for a GPU (NVIDIA Container Toolkit)."""
    assert _gpu_reserved(triton)


def test_compose_shared_memory_is_large_enough(triton: dict) -> None:
    """The Python backend moves tensors through /dev/shm; Docker's 64 MB default fails under
    load (python_backend README, "Managing Shared Memory")."""
    assert "shm_size" in triton, "shm_size is missing: Docker's 64 MB /dev/shm fails under load"
    assert _size_bytes(triton["shm_size"]) >= 256 * 1024**2


def _published(port: str | dict) -> tuple[str, int]:
    """``(host address, container port)`` of a compose port entry."""
    if isinstance(port, dict):
        return port.get("host_ip", ""), int(port["target"])
    parts = str(port).split(":")
    host_ip = parts[0] if len(parts) == 3 else ""
    return host_ip, int(parts[-1].split("/")[0])


def test_compose_ports_on_loopback_only(triton: dict) -> None:
    """gRPC and metrics are published on the host's 127.0.0.1 only; HTTP only through the
    HTTP guard (tests/server/test_http_guard.py)."""
    published = [_published(p) for p in triton["ports"]]
    assert {port for _, port in published} == {8001, 8002}
    assert all(host == "127.0.0.1" for host, _ in published), published


def test_compose_repository_mounted_read_only(triton: dict) -> None:
    """The host's model repository (artifacts and plans) is mounted over the image's copy,
    read-only."""
    target = "/opt/tritonrepo/model_repository"
    mounts = []
    for volume in triton["volumes"]:
        if isinstance(volume, dict):
            mounts.append((volume["source"], volume["target"], volume.get("read_only", False)))
        else:
            source, dest, *mode = volume.split(":")
            mounts.append((source, dest, "ro" in (mode[0].split(",") if mode else [])))
    (mount,) = [m for m in mounts if m[1] == target]
    assert (COMPOSE_FILE.parent / mount[0]).resolve() == REPO_ROOT / "model_repository"
    assert mount[2], f"{target} is mounted writable"


def test_compose_key_from_a_secret(compose: dict, triton: dict) -> None:
    """The repository key comes from a compose secret file, never from the compose file."""
    env = triton.get("environment", {})
    if isinstance(env, list):
        env = dict(e.split("=", 1) for e in env)
    assert "TRITONREPO_REPOSITORY_KEY" not in env, "no key in the compose file: use the secret"
    secrets = [s if isinstance(s, str) else s["source"] for s in triton["secrets"]]
    assert env["TRITONREPO_REPOSITORY_KEY_FILE"] in {f"/run/secrets/{s}" for s in secrets}
    for name in secrets:
        assert "file" in compose["secrets"][name], f"secret {name} has no file"


def test_compose_explicit_model_control(triton: dict) -> None:
    """The image's entrypoint (explicit model control, restricted repository API) is not
    overridden, and the command does not change the control mode."""
    assert "entrypoint" not in triton
    command = triton.get("command", [])
    command = shlex.split(command) if isinstance(command, str) else command
    modes = [a for a in command if a.startswith("--model-control-mode")]
    assert modes in ([], ["--model-control-mode=explicit"])
    script = ENTRYPOINT.read_text()
    assert "--model-control-mode=explicit" in script
    assert '--http-restricted-api="$restricted:$header=$key"' in script
    assert '--grpc-restricted-protocol="$restricted:$header=$key"' in script


def test_compose_healthcheck_probes_with_the_client(triton: dict) -> None:
    """The health check is `tritonrepo-client health` (server ready and real inferences), its
    flags are the CLI's, and its network timeout ends before Docker's."""
    check = triton["healthcheck"]
    test = check["test"]
    assert test[0] == "CMD", "exec form: no shell in between"
    assert test[1] == "tritonrepo-client"
    args = cli._parser().parse_args(test[2:])
    assert args.command == "health"
    assert args.timeout < _seconds(check["timeout"])


def test_compose_heal_sidecar_runs_the_clis_watch_with_the_key(compose: dict) -> None:
    """The heal service runs `tritonrepo-client heal --watch` (flags the CLI's) against the
    triton service, once it is healthy, with the repository key from the same secret."""
    heal = compose["services"]["heal"]
    assert heal["image"] == compose["services"]["triton"]["image"]
    assert heal["depends_on"]["triton"]["condition"] == "service_healthy"
    assert heal["entrypoint"] == ["tritonrepo-client"]
    args = cli._parser().parse_args(heal["command"])
    assert args.command == "heal" and args.watch and args.interval > 0
    assert args.url == "triton:8000"
    assert heal["environment"]["TRITONREPO_REPOSITORY_KEY_FILE"] == "/run/secrets/repository_key"
    assert heal["secrets"] == ["repository_key"]
    assert heal.get("read_only") is True


def _seconds(duration: str) -> float:
    """A compose duration (``10s``, ``1m30s``) in seconds."""
    units = {"h": 3600, "m": 60, "s": 1, "ms": 1e-3}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", duration)
    assert parts, f"unreadable duration {duration!r}"
    return sum(float(n) * units[u] for n, u in parts)


def test_compose_build_plans_service(compose: dict) -> None:
    """The builder service builds the plans on the GPU, from the builder image, into the
    mounted checkout, and only when asked for (a profile)."""
    builder = compose["services"]["build-plans"]
    assert builder["build"]["dockerfile"] == "docker/Dockerfile.builder"
    assert _gpu_reserved(builder)
    assert builder.get("profiles"), "`up` must not rebuild the plans"
    run = [*builder.get("entrypoint", []), *builder.get("command", [])]
    assert run[:3] == ["python", "-m", "builders.tensorrt.plans"]
    (mount,) = builder["volumes"]
    workdirs = [i.args for i in parse_dockerfile(DOCKER_DIR / "Dockerfile.builder")
                if i.keyword == "WORKDIR"]  # fmt: skip
    assert mount["target"] == workdirs[-1], "the checkout is mounted where the builder runs"
    assert not mount.get("read_only"), "the plans are written into the checkout"
    assert (COMPOSE_FILE.parent / mount["source"]).resolve() == REPO_ROOT


# --- docker/entrypoint.sh ---------------------------------------------------------------------


def test_entrypoint_loads_what_the_health_check_probes() -> None:
    """The image serves the launcher's models, which are the ones `health` probes by default:
    it asks the launcher's own list (python -m tritonrepo.server.load_list)."""
    assert "python -m tritonrepo.server.load_list" in ENTRYPOINT.read_text()


FAKE_PYTHON = """#!/usr/bin/env bash
# python: `import tensorrt` succeeds when $FAKE_TENSORRT=1; the load list is the real one; other
# -m runs are logged
[[ "$1" == -m && "$2" == tritonrepo.server.load_list ]] && exec "$REAL_PYTHON" "$@"
if [[ "$1" == "-c" && "$2" == *"import tensorrt"* ]]; then
  [[ "${FAKE_TENSORRT:-0}" == 1 ]]; exit
fi
echo "python $*" >> "$FAKE_LOG"
[[ "$2" != tritonrepo.server.preflight || "${FAKE_PREFLIGHT_FAIL:-0}" != 1 ]]
"""
FAKE_TRITONSERVER = """#!/usr/bin/env bash
echo "tritonserver $*" >> "$FAKE_LOG"
"""


def _entrypoint_repository(root: Path, plans: bool) -> Path:
    """A copy of the model repository's configs (configs/*.pbtxt too), with or without
    model.plan files."""
    repo = root / "model_repository"
    for config in (REPO_ROOT / "model_repository").glob("*/config.pbtxt"):
        (repo / config.parent.name / "1").mkdir(parents=True)
        shutil.copy(config, repo / config.parent.name / "config.pbtxt")
        for other in config.parent.glob("configs/*.pbtxt"):
            (repo / config.parent.name / "configs").mkdir(exist_ok=True)
            shutil.copy(other, repo / config.parent.name / "configs" / other.name)
        if plans and 'platform: "tensorrt_plan"' in config.read_text():
            (repo / config.parent.name / "1" / "model.plan").write_bytes(b"plan")
    return repo


def _run_entrypoint(
    tmp: Path, plans: bool, *args: str, **env: str
) -> tuple[subprocess.CompletedProcess, str]:
    """docker/entrypoint.sh with ``args`` and ``env`` on top of the stand-ins' environment (a
    key file in ``tmp``); the process and the stand-ins' log."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    for name, text in (("python", FAKE_PYTHON), ("tritonserver", FAKE_TRITONSERVER)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (tmp / "key").write_text("sekrit\n")
    log = tmp / "log"
    log.touch()
    full_env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "FAKE_LOG": str(log),
        "TRITONREPO_MODEL_REPOSITORY": str(_entrypoint_repository(tmp, plans)),
        "TRITONREPO_REPOSITORY_KEY_FILE": str(tmp / "key"),
        "REAL_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO_ROOT), os.environ.get("PYTHONPATH")))),
        **env,
    }
    proc = subprocess.run(
        ["bash", str(ENTRYPOINT), *args], env=full_env, capture_output=True, text=True,
        timeout=30, check=False,
    )  # fmt: skip
    return proc, log.read_text()


def test_entrypoint_without_plans_says_what_to_do(tmp_path) -> None:
    """No plans, even with TensorRT importable: one line naming the models and what to run
    (plans come from the builder image, `make build-plans`); nothing else runs."""
    for tensorrt in ("0", "1"):
        root = tmp_path / tensorrt
        root.mkdir()
        proc, log = _run_entrypoint(root, plans=False, FAKE_TENSORRT=tensorrt)
        assert proc.returncode == 1
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1, proc.stderr
        assert "text_embedding_encoder" in lines[0] and "make build-plans" in lines[0]
        assert log == ""


def test_entrypoint_with_plans_starts_the_server(tmp_path) -> None:
    """All plans present: the server starts, nothing is built."""
    proc, log = _run_entrypoint(tmp_path, plans=True)
    assert proc.returncode == 0, proc.stderr
    check, serve = log.splitlines()
    repo = tmp_path / "model_repository"
    # The models no other one uses that declare their probe (every described pipeline), by
    # name, found the same way by the entrypoint and by `make serve` (default_models).
    served = default_models(repo)
    assert list(served) == sorted(served)
    shipped = {"text_embedding", "ctr_ranking", "ctr_session", "image_classification"}
    assert {*shipped, "breast_cancer", "nudenet_detector"} <= set(served)
    # ...and what they call through BLS (config.pbtxt's ctr_session, a plan, calls nothing).
    loaded = ServerOptions(model_repository=repo, models=served, model_config_name=None)
    assert check == (
        f"python -m tritonrepo.server.preflight --repository {repo} --model-config-name  "
        + " ".join(f"--model={m}" for m in loaded.load_models)
    )
    assert serve.startswith("tritonserver ") and "--model-control-mode=explicit" in serve
    assert " ".join(f"--load-model={m}" for m in loaded.load_models) in serve
    locked = "model-repository,shared-memory,logging,trace:x-model-repository-key=sekrit"
    assert f"--http-restricted-api={locked}" in serve
    assert f"--grpc-restricted-protocol={locked}" in serve
    assert "--model-config-name" not in serve
    # The latency metrics the alert reads, with the launcher's quantiles.
    for flag in tritonserver_command(loaded, repo, "prefix", http_port=1, grpc_port=2):
        if flag.startswith("--metrics-config="):
            assert flag in serve.split()


def test_entrypoint_does_not_start_the_server_when_preflight_fails(tmp_path) -> None:
    """A preflight error (its findings are on stdout) stops the container before tritonserver."""
    proc, log = _run_entrypoint(tmp_path, plans=True, FAKE_PREFLIGHT_FAIL="1")
    assert proc.returncode == 1
    assert "the preflight above failed; tritonserver was not started" in proc.stderr
    assert "tritonserver" not in log.replace("tritonrepo.server.preflight", "")


def test_entrypoint_cpu_config_needs_no_plans(tmp_path) -> None:
    """TRITONREPO_CONFIG=cpu serves configs/cpu.pbtxt: no plans, no TensorRT needed."""
    proc, log = _run_entrypoint(tmp_path, plans=False, TRITONREPO_CONFIG="cpu")
    assert proc.returncode == 0, proc.stderr
    check, serve = log.splitlines()
    assert "--model-config-name cpu" in check
    assert serve.startswith("tritonserver ") and "--model-config-name=cpu" in serve
    # configs/cpu.pbtxt's ctr_session calls ctr_model through BLS: loaded first, checked too.
    assert serve.index("--load-model=ctr_model ") < serve.index("--load-model=ctr_session ")
    assert "--model=ctr_model" in check


def test_entrypoint_locks_the_same_apis_as_the_launcher() -> None:
    """The container restricts exactly ``RESTRICTED_APIS`` (the README's access table)."""
    from tritonrepo.server.repository_key import RESTRICTED_APIS

    match = re.search(r"^restricted=(\S+)$", ENTRYPOINT.read_text(), re.M)
    assert match and tuple(match[1].split(",")) == RESTRICTED_APIS


def test_container_runs_unprivileged_on_a_read_only_root(triton: dict) -> None:
    """Not root (the Dockerfile's last USER), read-only root filesystem, /tmp a tmpfs."""
    users = [i.args for i in parse_dockerfile(DOCKER_DIR / "Dockerfile") if i.keyword == "USER"]
    assert users and users[-1] not in ("root", "0")
    assert triton.get("read_only") is True
    assert "/tmp" in triton.get("tmpfs", [])


def test_https_proxy_terminates_tls_in_front_of_the_http_endpoint(compose: dict) -> None:
    """The "tls" profile's nginx listens with TLS and forwards to the HTTP guard."""
    proxy = compose["services"]["https"]
    assert proxy["profiles"] == ["tls"] and proxy["depends_on"] == ["http-guard"]
    assert all(str(p).startswith("127.0.0.1:") for p in proxy["ports"])
    assert {m["target"]: m["read_only"] for m in proxy["volumes"]} == {
        "/etc/nginx/nginx.conf": True,
        "/etc/nginx/tls": True,
    }
    conf = (DOCKER_DIR / "nginx.conf").read_text()
    assert "listen 8443 ssl;" in conf and "proxy_pass http://http-guard:8000;" in conf
    assert "ssl_protocols TLSv1.2 TLSv1.3;" in conf


def test_entrypoint_syntax() -> None:
    """bash parses the entrypoint."""
    subprocess.run(["bash", "-n", str(ENTRYPOINT)], check=True)
