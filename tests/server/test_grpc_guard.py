"""gRPC on the embedded 2.51 server: the gRPC guard's size bound and who may reach gRPC.

Triton 2.51 takes gRPC messages up to 2 GB and keeps the memory (tritonserver's heap and the
shared-memory region of every Python step the request passes). The gRPC guard (nginx
``grpc_pass``, :mod:`tritonrepo.server.grpc_guard`) refuses a call that sends more than 64 MiB;
these tests send larger ones to a throwaway server and check the caller's error, the server's
memory and that it keeps serving. ``tritonrepo-serve --expose`` must leave gRPC on the loopback
address (one gRPC classification request of a BYTES output ends 2.51, and no guard can refuse
it); ``--expose-grpc`` exposes it and says so.
"""

from __future__ import annotations

import io
import queue
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from PIL import Image
from tritonclient.utils import InferenceServerException

from tests.conftest import require_artifacts, server_options
from tests.server.test_server_restart import Serve, serve_command
from tritonrepo.server.http_guard import nginx_binary
from tritonrepo.server.launcher import TritonServer

pytestmark = pytest.mark.server

MODEL = "image_classification"
MIB = 1 << 20


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid``, bytes (``VmRSS`` of ``/proc/<pid>/status``, in kB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


def region_sizes(server: TritonServer) -> dict[str, int]:
    """Each shared-memory region of the server's Python stubs: its size in bytes."""
    return {p.name: p.stat().st_size for p in server.shared_memory_regions()}


def image_input(items: list[bytes]) -> grpcclient.InferInput:
    """IMAGE input of ``image_classification``: BYTES [len(items), 1]."""
    data = np.array([[item] for item in items], dtype=object)
    tensor = grpcclient.InferInput("IMAGE", list(data.shape), "BYTES")
    tensor.set_data_from_numpy(data)
    return tensor


def png() -> bytes:
    """A 64 x 64 red PNG: a valid image for a normal request."""
    out = io.BytesIO()
    Image.new("RGB", (64, 64), (200, 30, 30)).save(out, "PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def guarded_server() -> Iterator[TritonServer]:
    """A throwaway ``image_classification`` server with gRPC behind the gRPC guard."""
    require_artifacts()
    if nginx_binary() is None:
        pytest.fail("nginx is not installed (make test installs it: make guard-deps)")
    options = server_options("grpc_guard", models=(MODEL,), grpc_guard=True)
    with TritonServer(options) as server:
        yield server


def test_oversized_call_is_refused_and_memory_stays_bounded(guarded_server):
    """A 96 MiB call (8 items of 12 MiB; each under the 20 MiB per-image limit, so Triton would
    pass it to image_preprocess) gets RESOURCE_EXHAUSTED naming the limit, twice; tritonserver's
    RSS grows by less than the limit and no stub's region grows (without the guard, two 150 MiB
    calls took RSS from 40 to 733 MB and two regions from 1 to 152 MiB). The server then still
    classifies an image over the guard."""
    server = guarded_server
    limit = server.options.grpc_max_request_bytes
    pid = server.process.pid
    rss_before, regions_before = rss_bytes(pid), region_sizes(server)
    with grpcclient.InferenceServerClient(server.options.grpc_url) as client:
        for _ in range(2):
            with pytest.raises(InferenceServerException) as refused:
                items = [np.random.bytes(12 * MIB) for _ in range(8)]
                client.infer(MODEL, [image_input(items)], client_timeout=120)
            assert refused.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
            assert f"gRPC guard: request larger than {limit} bytes" in refused.value.message()
        assert rss_bytes(pid) - rss_before < limit
        assert region_sizes(server) == regions_before
        assert client.is_server_ready() and client.is_model_ready(MODEL)
        result = client.infer(MODEL, [image_input([png()])])
    assert result.as_numpy("LABELS").shape[0] == 1
    assert server.process.poll() is None


def test_a_call_under_the_limit_reaches_the_model(guarded_server):
    """48 MiB (4 x 12 MiB of noise) passes the guard: image_preprocess answers, naming IMAGE[0]."""
    items = [np.random.bytes(12 * MIB) for _ in range(4)]
    with (
        grpcclient.InferenceServerClient(guarded_server.options.grpc_url) as client,
        pytest.raises(InferenceServerException) as refused,
    ):
        client.infer(MODEL, [image_input(items)], client_timeout=120)
    assert refused.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "image_preprocess: IMAGE[0] is not a JPEG, PNG or WebP image" in refused.value.message()


def test_streaming_passes_the_guard(guarded_server):
    """ModelStreamInfer (tritonclient's start_stream) works through nginx's gRPC proxy."""
    answers: queue.Queue = queue.Queue()
    with grpcclient.InferenceServerClient(guarded_server.options.grpc_url) as client:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        try:
            client.async_stream_infer(MODEL, [image_input([png()])])
            result, error = answers.get(timeout=60)
        finally:
            client.stop_stream()
    assert error is None
    assert result.as_numpy("LABELS").shape[0] == 1


def listening_addresses(port: int) -> set[str]:
    """IPv4 addresses a socket listens on at ``port`` (``/proc/net/tcp``, state 0A = LISTEN)."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, port_hex = local.split(":")
        if state == "0A" and int(port_hex, 16) == port:
            found.add(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
    return found


def serve_exposed(tmp_path: Path, *extra: str) -> tuple[Serve, dict[str, int]]:
    """``tritonrepo-serve --expose EXTRA`` on free ports, waited until ready (180 s)."""
    command, ports = serve_command(tmp_path, "--expose", "--heal-interval", "0", *extra)
    serve = Serve.start(command, "test-grpc-guard-key")
    serve.wait_line(serve.out, r"^ready: ", 180)
    return serve, ports


def stop(serve: Serve) -> None:
    """Ctrl-C, as a user stops it; exit 0 within 60 s."""
    serve.process.send_signal(signal.SIGINT)
    assert serve.process.wait(60) == 0


@pytest.mark.parametrize("by_name", [False, True], ids=["expose", "expose-grpc"])
def test_grpc_is_exposed_only_when_asked_for_by_name(tmp_path, by_name):
    """--expose binds HTTP and metrics to 0.0.0.0 and gRPC to 127.0.0.1, and says where gRPC
    is; --expose-grpc binds gRPC to 0.0.0.0 too (through the gRPC guard) and warns on stderr,
    naming the crash and the release that fixes it."""
    require_artifacts()
    if nginx_binary() is None:
        pytest.fail("nginx is not installed (make test installs it: make guard-deps)")
    serve, ports = serve_exposed(tmp_path, *(["--expose-grpc"] if by_name else []))
    try:
        assert listening_addresses(ports["http"]) == {"0.0.0.0"}
        assert listening_addresses(ports["metrics"]) == {"0.0.0.0"}
        warning = [line for line in serve.err if line.startswith("warning: gRPC is reachable")]
        if by_name:
            assert listening_addresses(ports["grpc"]) == {"0.0.0.0"}
            assert len(warning) == 1
            for words in ("class_count", "BYTES output", "SIGFPE", "2.59.1", "25.07", "26.05"):
                assert words in warning[0]
        else:
            assert listening_addresses(ports["grpc"]) == {"127.0.0.1"}
            assert warning == []
            assert any("--expose-grpc to expose it" in line for line in serve.out)
        with grpcclient.InferenceServerClient(f"127.0.0.1:{ports['grpc']}") as client:
            assert client.infer("text_embedding", [_text("exposed?")]).as_numpy("EMBEDDING").size
        stop(serve)
    finally:
        serve.kill()


def _text(sentence: str) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput("TEXT", [1, 1], "BYTES")
    tensor.set_data_from_numpy(np.array([[sentence.encode()]], dtype=object))
    return tensor
