"""How the hostile cases (``tests/hostile_cases.py``) reach a server: raw HTTP over a socket
(for bodies ``http.client`` will not send: one-byte chunks, lying headers), ``http.client`` for
well-formed HTTP, and tritonclient for gRPC. Every sender returns a :class:`Reply`, never raises
for a server-side failure: a connection the server closed or reset (it died) is a reply too."""

from __future__ import annotations

import http.client
import json
import socket
import struct
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

CLOSED = "closed"  # the server closed or reset the connection without an answer
TIMEOUT_S = 30.0  # per request; the slowest answered case takes ~12 s behind the guard


@dataclass(frozen=True)
class Reply:
    """What a hostile request got back.

    Attributes:
        status: the HTTP status as text (``"200"``, ``"400"``), the gRPC status
            (``"StatusCode.OK"``, ``"StatusCode.INVALID_ARGUMENT"``), or :data:`CLOSED`.
        text: the response body, or the gRPC error message, or the socket error.
        body: the parsed JSON body of an HTTP answer ({} when it is not JSON); for gRPC the
            outputs as ``{name: ndarray}``.
    """

    status: str
    text: str
    body: Any = None

    @property
    def ok(self) -> bool:
        """Answered with a result (HTTP 200, gRPC OK)."""
        return self.status in ("200", "StatusCode.OK")


def _reply(status: int, raw: bytes) -> Reply:
    text = raw.decode("utf-8", errors="replace")
    try:  # the JSON header; binary output tensors may follow it
        body, _ = json.JSONDecoder().raw_decode(text)
    except ValueError:
        body = {}
    return Reply(str(status), text[:2000], body)


def http_request(
    host: str,
    port: int,
    path: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    method: str = "POST",
    timeout_s: float = TIMEOUT_S,
) -> Reply:
    """One HTTP/1.1 request with ``http.client`` (it sets ``Content-Length``)."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return _reply(response.status, response.read())
    except (OSError, http.client.HTTPException) as exc:
        return Reply(CLOSED, f"{type(exc).__name__}: {exc}")
    finally:
        conn.close()


def raw_request(
    host: str, port: int, head: bytes, parts: Iterable[bytes], timeout_s: float = TIMEOUT_S
) -> Reply:
    """Send ``head`` (request line and headers, ending in a blank line) and then ``parts`` as
    they are over one socket, and read the HTTP answer."""
    try:
        sock = socket.create_connection((host, port), timeout=timeout_s)
    except OSError as exc:
        return Reply(CLOSED, f"{type(exc).__name__}: {exc}")
    try:
        sock.sendall(head)
        for part in parts:
            sock.sendall(part)
        response = http.client.HTTPResponse(sock)
        response.begin()
        return _reply(response.status, response.read())
    except (OSError, http.client.HTTPException) as exc:
        return Reply(CLOSED, f"{type(exc).__name__}: {exc}")
    finally:
        sock.close()


def head_of(path: str, headers: dict[str, str], host: str = "127.0.0.1") -> bytes:
    """A POST request line and headers for :func:`raw_request`."""
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def chunked_parts(body: bytes, chunk_size: int) -> list[bytes]:
    """``body`` as ``Transfer-Encoding: chunked`` chunks of ``chunk_size`` bytes, the final
    zero-length chunk included, joined into a few large writes."""
    pieces = [
        b"%x\r\n%s\r\n" % (len(body[i : i + chunk_size]), body[i : i + chunk_size])
        for i in range(0, len(body), chunk_size)
    ]
    joined = b"".join(pieces) + b"0\r\n\r\n"
    step = 1 << 20
    return [joined[i : i + step] for i in range(0, len(joined), step)]


# --- bodies ---------------------------------------------------------------------------------
def json_body(inputs: list[dict], outputs: list[dict] | None = None, **parameters: Any) -> bytes:
    """A KServe v2 JSON inference body."""
    body: dict[str, Any] = {"inputs": inputs}
    if outputs is not None:
        body["outputs"] = outputs
    if parameters:
        body["parameters"] = parameters
    return json.dumps(body).encode()


def bytes_element(value: bytes) -> bytes:
    """One BYTES tensor element in Triton's binary form: 4-byte little-endian length + bytes."""
    return struct.pack("<I", len(value)) + value


def binary_body(header: dict, blobs: Sequence[bytes]) -> tuple[bytes, int]:
    """Triton's binary tensor extension: the JSON header followed by the raw blobs.

    Returns:
        (body, header length in bytes for ``Inference-Header-Content-Length``).
    """
    head = json.dumps(header).encode()
    return head + b"".join(blobs), len(head)


def gzip_bytes(data: bytes) -> bytes:
    """``data`` gzip-compressed (RFC 1952)."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    return c.compress(data) + c.flush()


def deflate_bytes(data: bytes) -> bytes:
    """``data`` as a zlib stream (RFC 1950), what Triton's ``Content-Encoding: deflate`` reads."""
    return zlib.compress(data, 9)


@cache
def gzip_bomb(json_prefix: bytes, inflated_bytes: int) -> bytes:
    """A gzip body that inflates to ``inflated_bytes``: ``json_prefix`` then spaces (still
    valid JSON). 400 MB of spaces compress to ~400 KB (deflate's ~1000:1 ceiling)."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    out = [c.compress(json_prefix)]
    block = b" " * (1 << 20)
    left = inflated_bytes - len(json_prefix)
    while left > 0:
        out.append(c.compress(block[: min(left, len(block))]))
        left -= len(block)
    out.append(c.flush())
    return b"".join(out)


# --- gRPC -----------------------------------------------------------------------------------
GrpcTensor = tuple[str, np.ndarray, "list[int] | None"]  # name, data, declared shape if it lies


def grpc_infer(
    host: str,
    port: int,
    model: str,
    tensors: Sequence[GrpcTensor],
    outputs: Sequence[tuple[str, int]] = (),
    timeout_s: float = TIMEOUT_S,
    **kwargs: Any,
) -> Reply:
    """One gRPC inference with tritonclient: ``outputs`` as ``(name, class_count)`` (0 = plain
    tensor); each input's datatype from its numpy dtype (object = BYTES)."""
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException, np_to_triton_dtype

    client = grpcclient.InferenceServerClient(f"{host}:{port}")
    try:
        inputs = []
        for name, array, declared in tensors:
            datatype = "BYTES" if array.dtype == object else np_to_triton_dtype(array.dtype)
            tensor = grpcclient.InferInput(name, list(array.shape), datatype)
            tensor.set_data_from_numpy(array)
            if declared is not None:
                tensor.set_shape(declared)
            inputs.append(tensor)
        requested = [grpcclient.InferRequestedOutput(n, class_count=c) for n, c in outputs]
        result = client.infer(
            model, inputs, outputs=requested or None, client_timeout=timeout_s, **kwargs
        )
        names = [n for n, _ in outputs] or [o.name for o in result.get_response().outputs]
        return Reply("StatusCode.OK", "", {n: result.as_numpy(n) for n in names})
    except InferenceServerException as exc:
        status = exc.status() or "StatusCode.UNKNOWN"
        if status in ("StatusCode.UNAVAILABLE", "StatusCode.CANCELLED"):
            return Reply(CLOSED, f"{status}: {exc.message()}")
        return Reply(status, exc.message() or "")
    finally:
        client.close()


def grpc_raw_infer(
    host: str,
    port: int,
    model: str,
    inputs: Sequence[tuple[str, str, list[int], bytes]],
    outputs: Sequence[str],
    timeout_s: float = TIMEOUT_S,
) -> Reply:
    """One ``ModelInfer`` built by hand (tritonclient would not send a lie): ``inputs`` as
    ``(name, datatype, shape, raw bytes)`` in ``raw_input_contents``."""
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    request = service_pb2.ModelInferRequest(model_name=model)
    for name, datatype, shape, raw in inputs:
        request.inputs.add(name=name, datatype=datatype, shape=shape)
        request.raw_input_contents.append(raw)
    for name in outputs:
        request.outputs.add(name=name)
    with grpc.insecure_channel(f"{host}:{port}") as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        try:
            response = stub.ModelInfer(request, timeout=timeout_s)
        except grpc.RpcError as exc:
            status = str(exc.code())
            if status in ("StatusCode.UNAVAILABLE", "StatusCode.CANCELLED"):
                return Reply(CLOSED, f"{status}: {exc.details()}")
            return Reply(status, exc.details() or "")
    return Reply("StatusCode.OK", "", {o.name: o for o in response.outputs})
