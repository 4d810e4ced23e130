"""Loopback binding and the key on the model-repository API, over HTTP and gRPC."""

from __future__ import annotations

import argparse
import ipaddress
import os
import stat

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import client_cli
from tritonrepo.server import repository_key, serve
from tritonrepo.text import spec
from tritonrepo_client import ClientError, EmbeddingClient, RepositoryClient

pytestmark = pytest.mark.server


def decode(address_hex: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An address as /proc/net/tcp* writes it (little-endian 32-bit words, hex)."""
    raw = bytes.fromhex(address_hex)
    host = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    address = ipaddress.ip_address(host)
    mapped = getattr(address, "ipv4_mapped", None)
    return mapped or address


def listening_addresses(port: int) -> set:
    """Addresses with a socket in LISTEN state on ``port`` (from /proc/net/tcp and tcp6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        with open(table) as fh:
            next(fh)
            for line in fh:
                local, state = line.split()[1], line.split()[3]
                address, port_hex = local.split(":")
                if state == "0A" and int(port_hex, 16) == port:
                    found.add(decode(address))
    return found


def test_all_endpoints_listen_on_loopback_only(triton_server):
    o = triton_server.options
    for port in (o.http_port, o.grpc_port, o.metrics_port):
        assert listening_addresses(port) == {ipaddress.ip_address("127.0.0.1")}, port


def raw(server, protocol):
    if protocol == "http":
        return httpclient.InferenceServerClient(server.options.http_url)
    return grpcclient.InferenceServerClient(server.options.grpc_url)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("key", [None, "wrong-key"], ids=["no-key", "wrong-key"])
def test_repository_api_refuses_without_the_key(triton_server, protocol, key):
    client = raw(triton_server, protocol)
    headers = repository_key.headers(key, protocol)
    try:
        for call in (
            lambda: client.get_model_repository_index(headers=headers),
            lambda: client.load_model(spec.NORMALIZE_MODEL, headers=headers),
            lambda: client.unload_model(spec.ENSEMBLE, headers=headers),
        ):
            with pytest.raises(InferenceServerException, match="restricted"):
                call()
        assert client.is_model_ready(spec.ENSEMBLE)  # nothing was unloaded
    finally:
        client.close()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_inference_and_health_need_no_key(triton_server, protocol):
    with EmbeddingClient(triton_server.options.url(protocol), protocol) as client:
        assert client.embed(["no key needed"]).shape == (1, spec.HIDDEN_SIZE)
    client = raw(triton_server, protocol)
    try:
        assert client.is_server_live() and client.is_server_ready()
        assert client.get_model_metadata(spec.ENSEMBLE)
    finally:
        client.close()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_repository_api_works_with_the_key(triton_server, protocol):
    url = triton_server.options.url(protocol)
    with RepositoryClient(url, protocol, key=triton_server.options.repository_key) as repo:
        rows = {(r.name, r.version): r.state for r in repo.index()}
        assert rows[(spec.ENSEMBLE, "1")] == "READY"
        repo.load(spec.NORMALIZE_MODEL)  # reload of a loaded model: allowed with the key
        assert repo.ready(spec.ENSEMBLE)
    no_key = r"refused: no repository key configured.*restricted"
    with RepositoryClient(url, protocol, key="") as repo, pytest.raises(ClientError, match=no_key):
        repo.index()


def test_cli_without_the_key_fails_in_one_line(triton_server):
    env = dict(os.environ, TRITONREPO_REPOSITORY_KEY="wrong-key")
    out = client_cli(
        "--url", triton_server.options.http_url, "models", "unload", spec.ENSEMBLE, env=env
    )
    assert out.returncode == 1
    assert out.stderr.count("\n") == 1 and "This API is restricted" in out.stderr
    assert out.stderr.startswith(
        f"error: unload {spec.ENSEMBLE} refused: the repository key sent was not accepted"
    )
    with EmbeddingClient(triton_server.options.http_url) as client:
        assert np.isfinite(client.embed(["still loaded"])).all()


def test_launcher_creates_a_private_key_when_none_is_given(tmp_path, monkeypatch):
    key_file = tmp_path / "repository.key"
    monkeypatch.setattr(repository_key, "DEFAULT_KEY_FILE", key_file)
    monkeypatch.delenv(repository_key.ENV_KEY, raising=False)
    monkeypatch.delenv(repository_key.ENV_KEY_FILE, raising=False)
    args = argparse.Namespace(no_repository_key=False, repository_key_file=None)
    key, note = serve.launcher_key(args)
    assert key and len(key) >= 32 and str(key_file) in note
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert serve.launcher_key(args)[0] == key  # reused, not regenerated
    monkeypatch.setenv(repository_key.ENV_KEY, "from-env")
    assert serve.launcher_key(args)[0] == "from-env"
    args.no_repository_key = True
    assert serve.launcher_key(args)[0] is None
