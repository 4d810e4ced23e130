"""gRPC over TLS end to end: a CA, server and client certificates made here with
``cryptography``, a real server with mutual TLS, and the clients with matching options.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.conftest import client_cli, require_artifacts, server_options
from tests.sentences import SENTENCES
from tritonrepo.server.launcher import GrpcServerTls, TritonServer
from tritonrepo.text import spec
from tritonrepo_client import ClientError, EmbeddingClient, GrpcTls

pytestmark = pytest.mark.server


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write(path: Path, key, cert: x509.Certificate) -> tuple[Path, Path]:
    key_file, cert_file = path.with_suffix(".key"), path.with_suffix(".pem")
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert_file, key_file


def issue(directory: Path, name: str, ca: tuple | None, server: bool) -> tuple:
    """A P-256 key and certificate signed by ``ca`` (``(cert, key)``; None: self-signed CA),
    valid for a day; server certificates name 127.0.0.1 and localhost."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc)
    issuer_cert, issuer_key = ca if ca else (None, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(name))
        .issuer_name(issuer_cert.subject if issuer_cert else _name(name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca is None, path_length=None), critical=True)
    )
    if ca is not None:
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if server:
        names = [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(issuer_key, hashes.SHA256())
    cert_file, key_file = _write(directory / name, key, cert)
    return cert, key, cert_file, key_file


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("pki")
    ca_cert, ca_key, ca_file, _ = issue(directory, "ca", None, server=False)
    _, _, server_cert, server_key = issue(directory, "server", (ca_cert, ca_key), server=True)
    _, _, client_cert, client_key = issue(directory, "client", (ca_cert, ca_key), server=False)
    other_cert, other_key, _, _ = issue(directory, "other-ca", None, server=False)
    _, _, stranger_cert, stranger_key = issue(
        directory, "stranger", (other_cert, other_key), server=False
    )
    return {
        "ca": ca_file,
        "server_cert": server_cert,
        "server_key": server_key,
        "client_cert": client_cert,
        "client_key": client_key,
        "stranger_cert": stranger_cert,
        "stranger_key": stranger_key,
    }


@pytest.fixture(scope="module", params=[False, True], ids=["triton-tls", "grpc-guard-tls"])
def tls_server(pki, request) -> Iterator[TritonServer]:
    """text_embedding with mutual TLS on gRPC (HTTP stays plain, on loopback): ended by Triton
    itself, or by the gRPC guard (nginx) in front of it, as ``tritonrepo-serve`` runs it."""
    require_artifacts()
    tls = GrpcServerTls(pki["server_cert"], pki["server_key"], client_ca=pki["ca"])
    options = server_options("tls", models=(spec.ENSEMBLE,), grpc_tls=tls, grpc_guard=request.param)
    with TritonServer(options) as server:
        yield server


def test_grpc_with_the_client_certificate_embeds(tls_server, pki, reference_embed):
    tls = GrpcTls(pki["ca"], pki["client_cert"], pki["client_key"])
    with EmbeddingClient(tls_server.options.grpc_url, "grpc", tls=tls) as client:
        got = client.embed(SENTENCES[:4])
    assert (got * reference_embed(SENTENCES[:4])).sum(axis=1).min() > 0.9999


@pytest.mark.parametrize(
    "case",
    ["plaintext", "no client certificate", "certificate from another CA", "server not trusted"],
)
def test_grpc_without_the_right_credentials_is_refused(tls_server, pki, case):
    tls = {
        "plaintext": None,
        "no client certificate": GrpcTls(pki["ca"]),
        "certificate from another CA": GrpcTls(
            pki["ca"], pki["stranger_cert"], pki["stranger_key"]
        ),
        "server not trusted": GrpcTls(pki["stranger_cert"], pki["client_cert"], pki["client_key"]),
    }[case]
    with (
        EmbeddingClient(tls_server.options.grpc_url, "grpc", timeout_s=10, tls=tls) as client,
        pytest.raises(ClientError),
    ):
        client.embed(["refused"])
    with EmbeddingClient(tls_server.options.http_url) as client:  # the server is fine
        assert client.embed(["still serving"]).shape == (1, spec.HIDDEN_SIZE)


def test_cli_takes_the_tls_options(tls_server, pki):
    out = client_cli(
        "--url",
        tls_server.options.grpc_url,
        "--protocol",
        "grpc",
        "--grpc-root-cert",
        str(pki["ca"]),
        "--grpc-client-cert",
        str(pki["client_cert"]),
        "--grpc-client-key",
        str(pki["client_key"]),
        "embed",
        "over TLS",
    )
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.split()) >= spec.HIDDEN_SIZE  # one vector printed


def test_tls_is_for_grpc_only():
    with pytest.raises(ValueError, match="reverse proxy"):
        EmbeddingClient("127.0.0.1:1", "http", tls=GrpcTls("ca.pem"))
