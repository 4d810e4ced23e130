"""The launcher against the real binary: failures explained in one line, clean stop."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import free_ports, require_artifacts, server_options
from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.server.launcher import LaunchError, TritonServer
from tritonrepo.text import spec

pytestmark = pytest.mark.server


def copy_repository(dest: Path) -> Path:
    """A copy of the model repository (with built artifacts) that a test may break."""
    require_artifacts()
    return Path(
        shutil.copytree(
            MODEL_REPOSITORY,
            dest / "model_repository",
            ignore=shutil.ignore_patterns("__pycache__"),
        )
    )


def test_port_in_use_is_explained_before_starting():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        server = TritonServer(server_options(grpc_port=port))
        with pytest.raises(LaunchError, match=f"gRPC port {port} on 127.0.0.1 is already in use"):
            server.start()
        assert server.process is None


def test_port_in_use_from_command_line_is_one_line():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        grpc_port, metrics_port = free_ports(2, avoid=[port])
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "tritonrepo.server.serve",
                "--http-port",
                str(port),
                "--grpc-port",
                str(grpc_port),
                "--metrics-port",
                str(metrics_port),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert out.returncode == 1
    assert (
        out.stderr == f"error: HTTP port {port} on 127.0.0.1 is already in use "
        "(Address already in use); stop the other process or choose another port\n"
    )


def test_missing_artifact_names_the_model_and_the_fix(tmp_path):
    repo = copy_repository(tmp_path)
    (repo / spec.ENCODER_MODEL / "1" / "model.onnx").unlink()
    server = TritonServer(server_options(model_repository=repo))
    with pytest.raises(LaunchError) as info:
        server.start()
    message = str(info.value)
    assert "\n" not in message
    assert f"preflight: model '{spec.ENCODER_MODEL}'" in message
    assert "1/model.onnx is missing; build it with `make artifacts`" in message
    assert server.process is None  # stopped after the failure


def test_broken_config_names_the_model(tmp_path):
    repo = copy_repository(tmp_path)
    config = repo / spec.NORMALIZE_MODEL / "config.pbtxt"
    config.write_text(config.read_text().replace('backend: "python"', 'backend: "no_such"'))
    with pytest.raises(
        LaunchError, match=f"model '{spec.NORMALIZE_MODEL}'.*backend 'no_such' is unknown"
    ):
        TritonServer(server_options(model_repository=repo)).start()


def test_unknown_model_is_refused():
    with pytest.raises(LaunchError, match="model 'nope' is not in the model repository"):
        TritonServer(server_options(models=("nope",))).start()


def test_serves_then_stops_cleanly_and_frees_ports():
    import tritonclient.http as httpclient

    require_artifacts()
    server = TritonServer(server_options("test_launcher"))
    server.start()
    options = server.options
    client = httpclient.InferenceServerClient(options.http_url)
    try:
        assert client.is_server_ready()
        assert client.is_model_ready(spec.ENSEMBLE)
        index = {
            m["name"]: m.get("state", "")  # a model never loaded has no state
            for m in client.get_model_repository_index(headers=options.repository_headers)
        }
    finally:
        client.close()
    assert index[spec.ENSEMBLE] == "READY"
    assert server.stop() == 0
    for port in (options.http_port, options.grpc_port, options.metrics_port):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))  # would raise if the server still held it
    log = Path(options.log_file).read_text()
    assert "Started HTTPService at 127.0.0.1" in log


def test_exposing_open_admin_apis_is_refused_without_insecure():
    out = subprocess.run(
        [sys.executable, "-m", "tritonrepo.server.serve", "--expose", "--no-repository-key"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 1
    assert out.stderr.startswith("error: refusing to serve on 0.0.0.0 with --no-repository-key")
    assert "add --insecure" in out.stderr and out.stderr.count("\n") == 1


@pytest.mark.parametrize("missing", ["nginx", "njs"])
def test_a_missing_http_guard_names_make_guard_deps_and_no_http_guard(
    missing, monkeypatch, tmp_path
):
    """Without nginx or its njs module (as on a fresh machine before `make guard-deps`), the
    launcher refuses before tritonserver starts and names both ways out."""
    from tritonrepo.server import http_guard

    if missing == "nginx":
        monkeypatch.setattr(http_guard, "nginx_binary", lambda: None)
    else:
        monkeypatch.setattr(http_guard, "NJS_MODULE", tmp_path / "ngx_http_js_module.so")
    require_artifacts()
    server = TritonServer(server_options(http_guard=True))
    with pytest.raises(LaunchError) as info:
        server.start()
    assert server.process is None and server.guard is None
    message = str(info.value)
    assert message.startswith("the HTTP guard cannot run: ")
    assert "make guard-deps" in message and "apt-get install nginx libnginx-mod-http-js" in message
    assert message.endswith("tritonrepo-serve --no-http-guard"), message


def test_loopback_addresses_are_recognised():
    from tritonrepo.server.serve import exposure_problem, is_loopback

    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.5")
    assert not is_loopback("example.internal")  # a name may resolve anywhere
    assert exposure_problem("127.0.0.1", open_admin=True, insecure=False) is None
    assert exposure_problem("10.0.0.5", open_admin=False, insecure=False) is None
    assert exposure_problem("10.0.0.5", open_admin=True, insecure=True) is None


def test_heal_interval_option():
    """--heal-interval: 10 s by default, 0 turns the supervisor off, a negative one is refused
    before anything starts."""
    from tritonrepo.server.serve import parse_args

    assert parse_args([]).heal_interval == 10.0
    assert parse_args(["--heal-interval", "0"]).heal_interval == 0.0
    out = subprocess.run(
        [sys.executable, "-m", "tritonrepo.server.serve", "--heal-interval", "-1"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 1
    assert out.stderr == "error: --heal-interval must be >= 0 seconds (0 = off)\n"


def test_restart_guard_and_stop_options():
    """Restart on crash and the HTTP guard are on by default; the limits are checked before
    anything starts; the stop bound stated covers Triton's exit timeout."""
    from tritonrepo.server.serve import parse_args

    args = parse_args([])
    assert not args.no_restart and not args.no_http_guard
    assert (args.restart_limit, args.exit_timeout) == (5, 30)
    assert parse_args(["--no-restart", "--no-http-guard"]).no_restart
    out = subprocess.run(
        [sys.executable, "-m", "tritonrepo.server.serve", "--restart-limit", "-1"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 1
    assert out.stderr == "error: --exit-timeout and --restart-limit must be >= 0\n"
    options = server_options(exit_timeout_s=12)
    assert "--exit-timeout-secs=12" in TritonServer(options).command(Path("/backends"))
    assert options.stop_bound_s > 12
