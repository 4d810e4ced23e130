"""Who may call what: every Triton endpoint family, over HTTP and gRPC, with no key, a wrong key
and the key (the README's "API access" table), plus the attacks that were open before.

Locked (``tritonrepo.server.repository_key.RESTRICTED_APIS``): model repository, shared memory
(system and CUDA), logging, trace. Open: health, metadata, inference, model config, statistics.
After every refused call the server is still ready and still embeds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.conftest import require_artifacts, server_options
from tritonrepo.server import repository_key
from tritonrepo.server.launcher import TritonServer
from tritonrepo.text import spec
from tritonrepo_client import EmbeddingClient

pytestmark = pytest.mark.server
PROTOCOLS = ["http", "grpc"]
KEYS = {"no-key": None, "wrong-key": "wrong-key", "key": "the-key"}
# Triton 2.51 refuses with "This API is restricted" (HTTP) or "This protocol is restricted"
# (gRPC), naming the header it expects.
RESTRICTED = r"This (API|protocol) is restricted, expecting header"


@pytest.fixture(scope="module")
def server() -> Iterator[TritonServer]:
    """A server of this module's own (its log and trace settings get changed), key-locked."""
    require_artifacts()
    options = server_options("api-access", models=(spec.ENSEMBLE,))
    with TritonServer(options) as started:
        yield started


def client_for(server: TritonServer, protocol: str):
    if protocol == "http":
        return httpclient, httpclient.InferenceServerClient(server.options.http_url)
    return grpcclient, grpcclient.InferenceServerClient(server.options.grpc_url)


def send_key(server: TritonServer, label: str, protocol: str) -> dict[str, str]:
    key = {"key": server.options.repository_key}.get(label, KEYS[label])
    return repository_key.headers(key, protocol)


def infer(module, client, headers: dict) -> object:
    tensor = module.InferInput("TEXT", [1, 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[b"who may call this"]], dtype=object))
    return client.infer(spec.ENSEMBLE, [tensor], headers=headers)


# family -> (locked?, call(module, client, headers)); a read of each family.
FAMILIES: dict[str, tuple[bool, Callable]] = {
    "health": (False, lambda m, c, h: c.is_server_ready(headers=h)),
    "metadata": (False, lambda m, c, h: c.get_model_metadata(spec.ENSEMBLE, headers=h)),
    "inference": (False, infer),
    "model-config": (False, lambda m, c, h: c.get_model_config(spec.ENSEMBLE, headers=h)),
    "statistics": (False, lambda m, c, h: c.get_inference_statistics(spec.ENSEMBLE, headers=h)),
    "model-repository": (True, lambda m, c, h: c.get_model_repository_index(headers=h)),
    "shared-memory (system)": (True, lambda m, c, h: c.get_system_shared_memory_status(headers=h)),
    "shared-memory (CUDA)": (True, lambda m, c, h: c.get_cuda_shared_memory_status(headers=h)),
    "logging": (True, lambda m, c, h: c.get_log_settings(headers=h)),
    "trace": (True, lambda m, c, h: c.get_trace_settings(headers=h)),
}


def assert_still_serving(server: TritonServer) -> None:
    with EmbeddingClient(server.options.grpc_url, "grpc") as client:
        assert client.embed(["still serving"]).shape == (1, spec.HIDDEN_SIZE)
    _, client = client_for(server, "http")
    try:
        assert client.is_server_ready()
    finally:
        client.close()


@pytest.mark.parametrize("label", list(KEYS))
@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("family", list(FAMILIES))
def test_access_table(server, family, protocol, label):
    locked, call = FAMILIES[family]
    module, client = client_for(server, protocol)
    try:
        if locked and label != "key":
            with pytest.raises(InferenceServerException, match=RESTRICTED):
                call(module, client, send_key(server, label, protocol))
        elif family == "shared-memory (CUDA)" and protocol == "http":
            # Allowed past the key; this server has no CUDA shared memory to report on a host
            # without a GPU, which is a different refusal.
            try:
                call(module, client, send_key(server, label, protocol))
            except InferenceServerException as exc:
                assert "restricted" not in str(exc)
        else:
            assert call(module, client, send_key(server, label, protocol)) is not None
    finally:
        client.close()


def python_backend_region(server) -> str:
    """The name of one of the server's Python-backend shared-memory regions (``/dev/shm``)."""
    regions = server.shared_memory_regions()
    assert regions, "the Python backend has a region under /dev/shm while text_embedding runs"
    return "/" + regions[0].name


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("label", ["no-key", "wrong-key"])
def test_registering_a_python_backend_region_is_refused(server, protocol, label):
    _module, client = client_for(server, protocol)
    try:
        with pytest.raises(InferenceServerException, match=RESTRICTED):
            client.register_system_shared_memory(
                "r2", python_backend_region(server), 64, headers=send_key(server, label, protocol)
            )
        status = client.get_system_shared_memory_status(headers=send_key(server, "key", protocol))
        assert "r2" not in str(status)
    finally:
        client.close()
    assert_still_serving(server)


# Settings a caller without the key must not change: (read, change) per family.
SETTINGS = {
    "logging": (
        lambda c, h: c.get_log_settings(headers=h),
        lambda c, h: c.update_log_settings({"log_verbose_level": 1}, headers=h),
    ),
    "trace": (
        lambda c, h: c.get_trace_settings(headers=h),
        lambda c, h: c.update_trace_settings(
            settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "1"}, headers=h
        ),
    ),
}


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("label", ["no-key", "wrong-key"])
@pytest.mark.parametrize("family", list(SETTINGS))
def test_changing_settings_is_refused(server, family, protocol, label):
    read, change = SETTINGS[family]
    _module, client = client_for(server, protocol)
    key = send_key(server, "key", protocol)
    try:
        before = read(client, key)
        with pytest.raises(InferenceServerException, match=RESTRICTED):
            change(client, send_key(server, label, protocol))
        assert read(client, key) == before
    finally:
        client.close()
    assert_still_serving(server)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("label", ["no-key", "wrong-key"])
def test_loading_a_model_from_a_file_override_is_refused(server, protocol, label):
    _module, client = client_for(server, protocol)
    config = '{"backend": "python", "max_batch_size": 0, "input": [], "output": []}'
    files = {"file:1/model.py": Path(__file__).read_bytes()}  # any bytes: it must not arrive
    try:
        with pytest.raises(InferenceServerException, match=RESTRICTED):
            client.load_model(
                "intruder", config=config, files=files, headers=send_key(server, label, protocol)
            )
        assert not client.is_model_ready("intruder")
    finally:
        client.close()
    assert_still_serving(server)


def test_the_key_holder_can_change_log_settings(server):
    _, client = client_for(server, "http")
    key = send_key(server, "key", "http")
    try:
        client.update_log_settings({"log_verbose_level": 1}, headers=key)
        assert client.get_log_settings(headers=key)["log_verbose_level"] == 1
        client.update_log_settings({"log_verbose_level": 0}, headers=key)
    finally:
        client.close()
