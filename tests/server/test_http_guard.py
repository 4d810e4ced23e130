"""The HTTP guard (tritonrepo.server.http_guard: nginx + njs) in front of a real, throwaway
tritonserver: the requests that end Triton 2.51 are refused with a 4xx and an error naming the
guard, the server stays up, and ordinary traffic through the guard gets the same answers as direct.

The hostile requests are only ever sent through the guard here; tests/server/test_hostile.py runs
the catalogue both direct and guarded.
"""

from __future__ import annotations

import http.client
import http.server
import json
import socket
import struct
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
import tritonclient.http as httpclient
import yaml
from tritonclient.utils import InferenceServerException

from tests.conftest import client_cli, key_file, require_artifacts, server_options
from tests.hostile_requests import probe_png
from tritonrepo.paths import BUILD_DIR, REPO_ROOT
from tritonrepo.server import http_guard_config
from tritonrepo.server.http_guard import HttpGuard, guard_available
from tritonrepo.server.launcher import LaunchError, TritonServer, free_port
from tritonrepo_client.control.guard_routes import GuardRoutes, GuardRoutesError, Route

MODELS = ("text_embedding", "image_classification")
TEXT_PATH = "/v2/models/text_embedding/infer"
IMAGE_PATH = "/v2/models/image_classification/infer"
RUN_DIR = BUILD_DIR / "test-logs" / "http-guard"


def require_guard() -> None:
    """Fail (not skip) without nginx + njs: `make test` installs them (make guard-deps)."""
    reason = guard_available()
    if reason:
        pytest.fail(reason)


@pytest.fixture(scope="module")
def server() -> Iterator[TritonServer]:
    """A server of this module's own (a request that got past the guard could end it)."""
    require_artifacts()
    require_guard()
    with TritonServer(server_options("test_http_guard", models=MODELS)) as s:
        yield s


@pytest.fixture(scope="module")
def guard(server: TritonServer) -> Iterator[HttpGuard]:
    with HttpGuard("127.0.0.1", free_port(), server.options.http_port, RUN_DIR / "main") as g:
        yield g


def post(port: int, path: str, body: bytes, headers: dict[str, str] | None = None):
    """``(status, parsed JSON body or {})`` of one POST to 127.0.0.1:port."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        conn.request("POST", path, body=body, headers=headers or {})
        response = conn.getresponse()
        raw = response.read()
    finally:
        conn.close()
    try:
        return response.status, json.loads(raw)
    except ValueError:
        return response.status, {}


def text_request(**extra) -> dict:
    inputs = [{"name": "TEXT", "datatype": "BYTES", "shape": [1, 1], "data": ["a guarded text"]}]
    return {"inputs": inputs, **extra}


def json_body(inputs: list[dict] | None = None, **extra) -> bytes:
    """A JSON request: text_request() with ``inputs`` replaced and ``extra`` fields added."""
    request = text_request(**extra)
    if inputs is not None:
        request["inputs"] = inputs
    return json.dumps(request).encode()


def image_binary_request(outputs: list[dict]) -> tuple[bytes, dict[str, str]]:
    """A binary-data request to image_classification: body and headers."""
    png = probe_png()
    element = struct.pack("<I", len(png)) + png
    header = {
        "inputs": [{"name": "IMAGE", "datatype": "BYTES", "shape": [1, 1],
                    "parameters": {"binary_data_size": len(element)}}],
        "outputs": outputs,
    }  # fmt: skip
    head = json.dumps(header).encode()
    return head + element, {"Inference-Header-Content-Length": str(len(head))}


def chunked(port: int, path: str, body: bytes, chunk: int) -> tuple[int, dict]:
    """POST ``body`` in ``chunk``-byte chunks over a raw socket; ``(status, JSON body)``."""
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
            "Content-Type: application/json\r\nConnection: close\r\n\r\n".encode()
        )
        parts = [b"%x\r\n%s\r\n" % (chunk, body[i : i + chunk]) for i in range(0, len(body), chunk)]
        sock.sendall(b"".join(parts) + b"0\r\n\r\n")
        raw = b""
        while data := sock.recv(1 << 16):
            raw += data
    head, _, payload = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    return status, json.loads(payload or b"{}")


def refusal_logged(guard: HttpGuard, match, timeout_s: float = 5.0) -> bool:
    """Whether a line of refusals.log matches within ``timeout_s`` seconds (nginx writes it
    after the answer has gone out)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if guard.refusals_log.is_file() and any(
            match(line) for line in guard.refusals_log.read_text().splitlines()
        ):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def assert_alive(server: TritonServer) -> None:
    assert server.process is not None and server.process.poll() is None, "tritonserver ended"
    client = httpclient.InferenceServerClient(server.options.http_url)
    assert client.is_server_live()


def _deep(levels: int) -> bytes:
    head = b'{"inputs":[{"name":"TEXT","datatype":"BYTES","shape":[1,1],"data":'
    return head + b"[" * levels + b"]" * levels + b"}]}"


def _gzip_bomb() -> bytes:
    """A valid request followed by 400 MB of JSON whitespace, gzip'd to ~400 KB."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)  # gzip framing
    parts = [compressor.compress(json.dumps(text_request()).encode())]
    spaces = b" " * (1 << 20)
    parts += [compressor.compress(spaces) for _ in range(400)]
    return b"".join(parts) + compressor.flush()


def binary(header: dict, blob: bytes) -> tuple[bytes, dict[str, str]]:
    """A binary-data request: JSON header, then ``blob``; body and headers."""
    head = json.dumps(header).encode()
    return head + blob, {"Inference-Header-Content-Length": str(len(head))}


# (case id, path, body, headers, expected status, rule in refusals.log, words of the error)
HOSTILE = [
    ("class_count_on_bytes_labels", IMAGE_PATH,
     *image_binary_request([{"name": "LABELS", "parameters": {"classification": 3}}]),
     400, "classification_bytes", "BYTES"),
    ("json_nested_100000_deep", TEXT_PATH, _deep(100_000), {}, 400, "json_depth", "nesting"),
    ("int64_shape_2pow32_plus_1", IMAGE_PATH,
     json.dumps({"inputs": [{"name": "TOP_K", "datatype": "INT64", "shape": [2**32 + 1, 2],
                             "data": [1]}]}).encode(), {}, 400, "shape_vs_body", "elements"),
    ("binary_shape_2pow32_plus_1", TEXT_PATH,
     *binary({"inputs": [{"name": "TEXT", "datatype": "INT64", "shape": [2**32 + 1, 2],
                          "parameters": {"binary_data_size": 16}}]}, b"\0" * 16),
     400, "shape_vs_binary_size", "binary_data_size"),
    ("negative_dim", TEXT_PATH,
     json_body([{"name": "TEXT", "datatype": "BYTES", "shape": [-1], "data": ["x"]}]),
     {}, 400, "shape_negative", "negative"),
    ("classification_smuggled_by_duplicate_key", IMAGE_PATH,
     b'{"inputs":[{"name":"TOP_K","datatype":"INT32","shape":[1,1],"data":[1]}],"outputs":'
     b'[{"name":"LABELS","parameters":{"classification":3,"classification":0}}]}',
     {}, 400, "json_duplicate_key", "duplicate"),
    ("classification_string", TEXT_PATH,
     json_body(outputs=[{"name": "EMBEDDING", "parameters": {"classification": "3"}}]),
     {}, 400, "classification_type", "classification"),
    ("priority_string", TEXT_PATH, json_body(parameters={"priority": "high"}),
     {}, 400, "parameter_type", "priority"),
    ("unknown_datatype", TEXT_PATH,
     json_body([{"name": "TEXT", "datatype": "STRING", "shape": [1], "data": ["x"]}]),
     {}, 400, "datatype", "datatype"),
    ("binary_sizes_do_not_add_up", TEXT_PATH,
     *binary({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1, 1],
                          "parameters": {"binary_data_size": 1 << 30}}]}, b"\0" * 9),
     400, "binary_size_sum", "add up"),
    ("header_length_beyond_body", TEXT_PATH, json.dumps(text_request()).encode(),
     {"Inference-Header-Content-Length": "99999999999"}, 400, "header_length", "header size"),
    ("gzip_bomb_400kb_to_400mb", TEXT_PATH, _gzip_bomb, {"Content-Encoding": "gzip"}, 415, "-",
     "Content-Encoding"),
    ("repository_load_json_too_deep", "/v2/repository/models/text_embedding/load", _deep(5000), {},
     400, "json_depth", "nesting"),
    # A product that overflows to Infinity and then meets a 0 is NaN, which passes every
    # comparison: each dimension is checked as it is multiplied in.
    ("shape_overflow_then_zero", TEXT_PATH,
     json_body([{"name": "TEXT", "datatype": "INT64", "shape": [2**53 - 1] * 20 + [0],
                 "data": []}]), {}, 400, "shape_overflow", "2^53"),
    # The versioned path takes the same checks as the plain one.
    ("versioned_path_json_too_deep", "/v2/models/text_embedding/versions/1/infer",
     _deep(100_000), {}, 400, "json_depth", "nesting"),
]  # fmt: skip


@pytest.mark.parametrize("case", HOSTILE, ids=[c[0] for c in HOSTILE])
def test_hostile_request_is_refused_and_the_server_lives(server, guard, case) -> None:
    """Each request that ends (or, for the gzip bomb, bloats) Triton 2.51 gets a 4xx with the
    guard's error and its rule in refusals.log; tritonserver is live afterwards."""
    _, path, body, headers, status, rule, words = case
    got, answer = post(guard.listen_port, path, body() if callable(body) else body, headers)
    assert got == status, answer
    assert "http guard" in answer.get("error", "") and words.lower() in answer["error"].lower()
    assert_alive(server)
    entry = f'{path} HTTP/1.1" {status} '
    assert refusal_logged(guard, lambda line: entry in line and line.endswith(f"rule={rule}"))


# (case id, request inputs, Triton 2.51's own status and words, the guard's rule and words):
# JSON `data` that does not fit the datatype or the shape is a 500 from Triton ("Unable to
# parse 'data'"), and an empty batch is answered with the words of a wrong-dtype client.
MISFIT = [
    ("number_where_text_expected",
     [{"name": "TEXT", "datatype": "BYTES", "shape": [1, 1], "data": [7]}],
     500, "Unable to parse JSON bytes array", "data_type", "expected a string"),
    ("text_where_integer_expected",
     [{"name": "TOP_K", "datatype": "INT32", "shape": [1, 1], "data": ["3"]},
      {"name": "IMAGE", "datatype": "BYTES", "shape": [1, 1], "data": ["x"]}],
     500, "Unable to parse 'data'", "data_type", "expected an integer"),
    ("more_elements_than_the_shape",
     [{"name": "TOP_K", "datatype": "INT32", "shape": [1, 1], "data": [3, 4]},
      {"name": "IMAGE", "datatype": "BYTES", "shape": [1, 1], "data": ["x"]}],
     500, "Shape does not match", "data_count", "has 1"),
    ("empty_batch",
     [{"name": "TOP_K", "datatype": "INT32", "shape": [0, 1], "data": []},
      {"name": "IMAGE", "datatype": "BYTES", "shape": [0, 1], "data": []}],
     400, "expected 1 string elements", "empty_batch", "empty batch"),
]  # fmt: skip


@pytest.mark.parametrize("case", MISFIT, ids=[c[0] for c in MISFIT])
def test_data_that_does_not_fit_gets_a_400_that_names_the_input(server, guard, case) -> None:
    """Direct, Triton answers these with a 500 (a server error for a client's mistake) or with
    misleading words; through the guard each is a 400 that says what is wrong, logged with its
    rule, and the server goes on answering."""
    _, inputs, triton_status, triton_words, rule, words = case
    path = IMAGE_PATH if inputs[0]["name"] == "TOP_K" else TEXT_PATH
    body = json_body(inputs)
    status, answer = post(server.options.http_port, path, body)
    assert status == triton_status and triton_words in answer["error"], answer
    status, answer = post(guard.listen_port, path, body)
    assert status == 400 and words in answer["error"] and "http guard" in answer["error"], answer
    entry = f'{path} HTTP/1.1" 400 '
    assert refusal_logged(guard, lambda line: entry in line and line.endswith(f"rule={rule}"))
    assert post(guard.listen_port, TEXT_PATH, json_body())[0] == 200


def test_million_one_byte_chunks_reach_triton_as_one_body(server, guard) -> None:
    """Triton 2.51 ends on a body of 1,000,000 one-byte chunks (alloca per chunk); the guard
    reads the whole body first and sends it on with a Content-Length: answered, server alive."""
    body = json.dumps(text_request()).encode()
    body += b" " * (1_000_000 - len(body))
    status, answer = chunked(guard.listen_port, TEXT_PATH, body, 1)
    assert status == 200, answer
    outputs = {o["name"]: o for o in answer["outputs"]}
    assert outputs["EMBEDDING"]["shape"] == [1, 384]
    assert_alive(server)


def test_body_larger_than_the_cap_is_413(server) -> None:
    """max_body_bytes caps the body (client_max_body_size), with a JSON error."""
    with HttpGuard("127.0.0.1", free_port(), server.options.http_port, RUN_DIR / "small",
                   max_body_bytes=4096) as small:  # fmt: skip
        status, answer = post(small.listen_port, TEXT_PATH, b"{" + b" " * 8192 + b"}")
        assert status == 413 and "4096" in answer["error"]
        status, answer = post(small.listen_port, TEXT_PATH, json.dumps(text_request()).encode())
        assert status == 200, answer
    assert small.process is None


def test_key_holders_load_requests_may_be_large(server) -> None:
    """A repository load request with the server's key may exceed max_body_bytes (a rollout's
    upload mode) up to max_upload_bytes, and reaches Triton (whose own answer comes back); one
    without the key, or with a wrong key, keeps max_body_bytes."""
    key = server.options.repository_key
    with HttpGuard("127.0.0.1", free_port(), server.options.http_port, RUN_DIR / "upload",
                   max_body_bytes=4096, repository_key=key,
                   max_upload_bytes=1 << 20) as small:  # fmt: skip
        path = "/v2/repository/models/no_such_model/load"
        body = b'{"parameters": {}' + b" " * 65536 + b"}"  # JSON whitespace
        status, answer = post(small.listen_port, path, body, server.options.repository_headers)
        assert "no_such_model" in answer["error"], answer  # Triton's answer, past the guard
        for headers in (
            {},
            {"x-model-repository-key": key[:-1] + ("a" if key[-1] != "a" else "b")},
        ):
            status, answer = post(small.listen_port, path, body, headers)
            assert status == 413 and "4096" in answer["error"], answer
        huge = b'{"parameters": {}' + b" " * (2 << 20) + b"}"
        status, answer = post(small.listen_port, path, huge, server.options.repository_headers)
        assert status == 413 and "repository load request larger than 1048576" in answer["error"]
    assert_alive(server)


def test_route_changes_need_the_key_the_guard_was_started_with(server, guard) -> None:
    """A guard started with the server's key refuses route changes without it (403) and takes
    them with it; one started without a key (a server run with --no-repository-key, whose
    admin APIs are open) takes them from any caller."""
    route = Route("text_embedding__canary", 0.0, 0.0)
    with HttpGuard("127.0.0.1", free_port(), server.options.http_port, RUN_DIR / "keyed",
                   repository_key=server.options.repository_key) as keyed:  # fmt: skip
        url = f"127.0.0.1:{keyed.listen_port}"
        with pytest.raises(GuardRoutesError, match=r"403: .*repository key"):
            GuardRoutes(url, {}).set("text_embedding", route)
        holder = GuardRoutes(url, server.options.repository_headers)
        holder.set("text_embedding", route)
        assert GuardRoutes(url, {}).routes()["text_embedding"] == route
        holder.remove("text_embedding")
    anyone = GuardRoutes(f"127.0.0.1:{guard.listen_port}", {})
    anyone.set("text_embedding", route)
    assert anyone.routes()["text_embedding"] == route
    anyone.remove("text_embedding")
    assert "text_embedding" not in anyone.routes()


def test_routes_are_refused_unless_they_name_models(guard) -> None:
    """The routes API refuses a path with more than a model name, names every object has
    (``__proto__``, ``constructor``), overlong names and bodies that are not JSON objects, and
    keeps nothing of them."""
    port = guard.listen_port
    good = {"canary": "text_embedding__canary", "weight": 0, "shadow": 0}
    cases = [
        ("/_guard/routes/a/b", good, 404, "no such path"),
        ("/_guard/routes/__proto__", good, 400, "not a model name"),
        ("/_guard/routes/constructor", good, 400, "not a model name"),
        ("/_guard/routes/text_embedding", [], 400, "JSON object"),
        ("/_guard/routes/text_embedding", {**good, "canary": "x" * 256}, 400, "another model"),
        ("/_guard/routes/text_embedding", {**good, "canary": "__proto__"}, 400, "another model"),
    ]
    for path, body, status, says in cases:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            conn.request(
                "PUT", path, body=json.dumps(body), headers={"Content-Type": "application/json"}
            )
            response = conn.getresponse()
            answer = json.loads(response.read())
        finally:
            conn.close()
        assert response.status == status and says in answer["error"], (path, answer)
    assert GuardRoutes(f"127.0.0.1:{port}", {}).routes() == {}


def test_every_request_chosen_for_shadowing_is_copied_whatever_its_timeout(server, guard):
    """With a route copying 100 % of text_embedding's requests, each one is copied to the
    shadow comparison: plain tritonclient requests (no timeout of their own: the guard sets
    one), requests with a ``timeout`` parameter, and one with a Triton-Timeout-Ms header. The
    "canary" here is image_classification, which fails every text copy: copying is what is
    counted, and each caller still gets its embedding."""
    routes = GuardRoutes(f"127.0.0.1:{guard.listen_port}", {})
    routes.clear_shadow("text_embedding")
    routes.set("text_embedding", Route("image_classification", 0.0, 100.0))
    client = httpclient.InferenceServerClient(f"127.0.0.1:{guard.listen_port}")
    try:
        text = httpclient.InferInput("TEXT", [1, 1], "BYTES")
        text.set_data_from_numpy(np.array([[b"a copied text"]], dtype=object))
        sent = [
            client.infer("text_embedding", [text]),
            client.infer("text_embedding", [text]),
            client.infer("text_embedding", [text], timeout=30_000_000),
            client.infer("text_embedding", [text], timeout=30_000_000),
            client.infer("text_embedding", [text], headers={"Triton-Timeout-Ms": "30000"}),
        ]
        assert all(r.as_numpy("EMBEDDING").shape == (1, 384) for r in sent)
        deadline = time.monotonic() + 30.0
        summary = routes.shadow("text_embedding")
        while summary["compared"] < len(sent) and time.monotonic() < deadline:
            time.sleep(0.2)
            summary = routes.shadow("text_embedding")
        assert summary["compared"] == len(sent), summary
        assert summary["stable_failed"] == 0 and summary["canary_failed"] == len(sent), summary
    finally:
        client.close()
        routes.remove("text_embedding")
        routes.clear_shadow("text_embedding")
    assert_alive(server)


def test_json_larger_than_the_parse_cap_is_413(server) -> None:
    """max_json_bytes caps what njs parses: a larger JSON body gets 413 naming binary data,
    while the same tensor sent as binary data (only its small JSON header is parsed) is served."""
    with HttpGuard("127.0.0.1", free_port(), server.options.http_port, RUN_DIR / "json-cap",
                   max_json_bytes=2048) as small:  # fmt: skip
        texts = ["hello " * 100] * 8
        big = json_body([{"name": "TEXT", "datatype": "BYTES", "shape": [8, 1], "data": texts}])
        assert len(big) > 2048
        status, answer = post(small.listen_port, TEXT_PATH, big)
        assert status == 413 and "binary" in answer["error"], answer
        client = httpclient.InferenceServerClient(f"127.0.0.1:{small.listen_port}")
        try:
            infer_input = httpclient.InferInput("TEXT", [8, 1], "BYTES")
            infer_input.set_data_from_numpy(np.array(texts, dtype=object).reshape(8, 1))
            result = client.infer("text_embedding", [infer_input])
            assert result.as_numpy("EMBEDDING").shape == (8, 384)
        finally:
            client.close()
    assert_alive(server)


def test_guard_answers_like_triton(server, guard) -> None:
    """tritonclient on the guard's port: the same embeddings (JSON and binary), classes,
    metadata, health and repository index (with its key) as direct; Triton's own errors pass
    through unchanged."""
    direct = httpclient.InferenceServerClient(server.options.http_url)
    guarded = httpclient.InferenceServerClient(guard.url)
    texts = np.array([["the guard passes this"], ["and this"]], dtype=object)

    def embed(client, binary: bool) -> np.ndarray:
        tensor = httpclient.InferInput("TEXT", [2, 1], "BYTES")
        tensor.set_data_from_numpy(texts, binary_data=binary)
        out = httpclient.InferRequestedOutput("EMBEDDING", binary_data=binary)
        return client.infer("text_embedding", [tensor], outputs=[out]).as_numpy("EMBEDDING")

    for binary in (False, True):
        np.testing.assert_allclose(embed(guarded, binary), embed(direct, binary), atol=1e-6)

    def classify(client) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        image = httpclient.InferInput("IMAGE", [1, 1], "BYTES")
        image.set_data_from_numpy(np.array([[probe_png()]], dtype=object))
        outputs = [httpclient.InferRequestedOutput(n) for n in ("LABELS", "SCORES")]
        outputs.append(httpclient.InferRequestedOutput("PROBABILITIES", class_count=3))
        result = client.infer("image_classification", [image], outputs=outputs)
        return tuple(result.as_numpy(n) for n in ("LABELS", "SCORES", "PROBABILITIES"))

    for ours, theirs in zip(classify(guarded), classify(direct), strict=True):
        assert ours.shape == theirs.shape and ours.tolist() == theirs.tolist()

    key = server.options.repository_headers
    assert guarded.get_model_repository_index(headers=key) == direct.get_model_repository_index(
        headers=key
    )
    with pytest.raises(InferenceServerException, match="restricted"):
        guarded.get_model_repository_index()
    assert guarded.get_model_metadata("image_classification") == direct.get_model_metadata(
        "image_classification"
    )
    assert guarded.is_server_live() and guarded.is_server_ready()
    assert guarded.is_model_ready("text_embedding")
    unknown = httpclient.InferInput("TEXT", [1, 1], "BYTES")
    unknown.set_data_from_numpy(texts[:1])
    with pytest.raises(InferenceServerException, match="unknown model"):
        guarded.infer("no_such_model", [unknown])


def test_nan_in_json_data_passes(server, guard) -> None:
    """Triton reads NaN/Infinity in JSON (tritonclient writes them for float data); the guard
    passes them on: the answer is Triton's own."""
    body = json.dumps(text_request(parameters={"x": float("nan")})).encode()
    assert b"NaN" in body
    status, direct = post(server.options.http_port, TEXT_PATH, body)
    assert post(guard.listen_port, TEXT_PATH, body) == (status, direct)


def test_start_fails_in_one_line_when_the_port_is_taken(server, guard) -> None:
    other = HttpGuard("127.0.0.1", guard.listen_port, server.options.http_port, RUN_DIR / "taken")
    with pytest.raises(LaunchError, match="already in use") as info:
        other.start()
    assert "\n" not in str(info.value) and other.process is None


class _Recorder(http.server.BaseHTTPRequestHandler):
    """A stand-in upstream that answers every POST with what it received: the framing headers,
    the body's length and the client port of its connection."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        seen = {
            "content_length": self.headers.get("Content-Length"),
            "transfer_encoding": self.headers.get("Transfer-Encoding"),
            "received": len(self.rfile.read(length)),
            "peer_port": self.client_address[1],
        }
        answer = json.dumps(seen).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args) -> None:
        pass


def test_chunked_bodies_reach_the_upstream_with_a_length_over_kept_alive_connections() -> None:
    """nginx reads a chunked body whole and sends it on with Content-Length (no
    Transfer-Encoding), and reuses its upstream connections (HTTP/1.1 keep-alive)."""
    require_guard()
    upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=upstream.serve_forever, daemon=True)
    thread.start()
    try:
        port = upstream.server_address[1]
        with HttpGuard("127.0.0.1", free_port(), port, RUN_DIR / "recorder", workers=1) as g:
            # A request with its own queue timeout (below the guard's cap) passes unchanged.
            timed = text_request(parameters={"timeout": 60_000_000})
            body = json.dumps(timed).encode().ljust(100_000)
            status, seen = chunked(g.listen_port, TEXT_PATH, body, 1)
            assert status == 200, seen
            assert seen["content_length"] == str(len(body)) and seen["received"] == len(body)
            assert seen["transfer_encoding"] is None
            small = json.dumps(text_request()).encode()
            peers = {post(g.listen_port, TEXT_PATH, small)[1]["peer_port"]
                     for _ in range(20)}  # fmt: skip
            assert len(peers) < 20, "every request opened a new upstream connection"
    finally:
        upstream.shutdown()
        upstream.server_close()


# --- the committed container renderings ---------------------------------------------------------


def test_deploy_renderings_are_current() -> None:
    """docker/guard.nginx.conf and the Kubernetes copies are what the template renders
    (`python -m tritonrepo.server.http_guard_config` rewrites them)."""
    for path, text in http_guard_config.deploy_files().items():
        assert path.is_file() and path.read_text() == text, (
            f"{path.relative_to(REPO_ROOT)} is stale: "
            "run python -m tritonrepo.server.http_guard_config"
        )


def test_settings_are_validated() -> None:
    with pytest.raises(ValueError, match="max_body_bytes"):
        http_guard_config.GuardSettings(listen="1", upstream="x:1", max_body_bytes=0)


def test_compose_puts_the_guard_in_front_of_http() -> None:
    """Triton's HTTP port is not published; the guard's is, on loopback, forwarding to
    triton:8000 with the committed config and script."""
    compose = yaml.safe_load((REPO_ROOT / "docker" / "compose.yaml").read_text())
    services = compose["services"]
    assert not any(str(p).endswith(":8000") for p in services["triton"]["ports"])
    guard = services["http-guard"]
    assert guard["ports"] == ["127.0.0.1:8000:8000"]
    mounts = {Path(v["source"]).name: v["target"] for v in guard["volumes"]}
    assert mounts["guard.nginx.conf"] == "/etc/nginx/guard/nginx.conf"
    assert mounts["kserve_guard.js"] == "/etc/nginx/guard/kserve_guard.js"
    conf = (REPO_ROOT / "docker" / "guard.nginx.conf").read_text()
    assert "server triton:8000 resolve;" in conf and "listen 8000;" in conf


def test_the_guard_says_where_tritons_metrics_are_or_that_it_cannot(server, guard) -> None:
    """The launcher's guard tells its clients the metrics port of the server it routes to, and
    the canary reads the figures there; a guard that was not told says so, and the canary
    refuses (exit 1, naming --metrics-url) instead of reading another server's port 8002."""
    options = server_options("test_http_guard_upstream", models=("click_lightgbm",),
                             http_guard=True)  # fmt: skip
    with TritonServer(options) as launched:
        told = GuardRoutes(launched.options.http_url, {}).metrics_port()
        assert told == launched.options.metrics_port
    assert GuardRoutes(guard.url, {}).metrics_port() is None
    key = key_file(server, RUN_DIR)
    done = client_cli(
        "--url", guard.url, "--repository-key-file", str(key), "canary", "text_embedding",
        "--model", "text_embedding_encoder", "--version", "2",
    )  # fmt: skip
    assert done.returncode == 1, done.stdout
    assert "does not know Triton's metrics port" in done.stderr and "--metrics-url" in done.stderr


class _TwoVersions(http.server.BaseHTTPRequestHandler):
    """An upstream whose model ``serving`` and ``candidate`` answer fixed outputs: per row a
    probability, class scores, a label, an embedding; and a ranked list of ids."""

    protocol_version = "HTTP/1.1"
    ANSWERS: ClassVar[dict[str, list[dict]]] = {
        "serving": [
            {"name": "P", "datatype": "FP32", "shape": [4, 1], "data": [0.2, 0.7, 0.9, 0.4]},
            {"name": "S", "datatype": "FP32", "shape": [4, 3],
             "data": [0.1, 0.8, 0.1, 0.6, 0.3, 0.1, 0.2, 0.2, 0.6, 0.3, 0.3, 0.4]},
            {"name": "L", "datatype": "BYTES", "shape": [4, 1], "data": ["a", "b", "c", "d"]},
            {"name": "E", "datatype": "FP32", "shape": [4, 2], "data": [1, 0, 0, 1, 1, 1, 3, 4]},
            {"name": "IDS", "datatype": "INT64", "shape": [4], "data": [7, 8, 9, 10]},
        ],
        "candidate": [
            {"name": "P", "datatype": "FP32", "shape": [4, 1], "data": [0.5, 0.6, 0.8, 0.1]},
            {"name": "S", "datatype": "FP32", "shape": [4, 3],
             "data": [0.2, 0.7, 0.1, 0.1, 0.8, 0.1, 0.1, 0.1, 0.8, 0.5, 0.2, 0.3]},
            {"name": "L", "datatype": "BYTES", "shape": [4, 1], "data": ["a", "x", "c", "d"]},
            {"name": "E", "datatype": "FP32", "shape": [4, 2], "data": [1, 0, 1, 0, 2, 2, 3, 4]},
            {"name": "IDS", "datatype": "INT64", "shape": [4], "data": [8, 7, 1, 2]},
        ],
    }  # fmt: skip

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        model = self.path.split("/")[3]
        body = json.dumps({"model_name": model, "outputs": self.ANSWERS[model]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def test_the_shadow_comparison_scores_every_row_by_each_measure() -> None:
    """A route that compares five outputs by six measures: the guard's summary gives each
    measure's per-row scores as computed by hand (the decision at 0.5 changes on row 0, by
    0.3, as row 3 moves by 0.3 on the same side; the argmax on rows 1 and 3; the label on row 1;
    the cosine is 1, 0, 1, 1; two of four ids are shared), so the canary judges shares and
    quantiles of rows, not the worst one."""
    require_guard()
    upstream = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _TwoVersions)
    thread = threading.Thread(target=upstream.serve_forever, daemon=True)
    thread.start()
    guard = HttpGuard("127.0.0.1", free_port(), upstream.server_address[1], RUN_DIR / "measures")
    specs = [{"output": "P", "measure": "decision", "threshold": 0.5},
             {"output": "P", "measure": "abs_diff"}, {"output": "S", "measure": "argmax"},
             {"output": "L", "measure": "exact"}, {"output": "E", "measure": "cosine"},
             {"output": "IDS", "measure": "overlap"}]  # fmt: skip
    body = json.dumps({"inputs": [{"name": "X", "datatype": "FP32", "shape": [4, 1],
                                   "data": [1, 2, 3, 4]}]}).encode()  # fmt: skip
    try:
        with guard:
            routes = GuardRoutes(f"127.0.0.1:{guard.listen_port}", {})
            routes.clear_shadow("serving")  # a run directory of an earlier run keeps its lines
            routes.set("serving", Route("candidate", 0.0, 100.0, specs))
            for _ in range(3):
                assert post(guard.listen_port, "/v2/models/serving/infer", body)[0] == 200
            deadline = time.monotonic() + 30.0
            summary = routes.shadow("serving")
            while summary["compared"] < 3 and time.monotonic() < deadline:
                time.sleep(0.1)
                summary = routes.shadow("serving")
            routes.remove("serving")
    finally:
        upstream.shutdown()
        upstream.server_close()
    measures = summary["measures"]
    assert summary["compared"] == 3 and summary["canary_failed"] == 0, summary
    assert measures["P:decision"]["rows"] == 12 and measures["P:decision"]["mean"] == 0.75
    assert measures["P:abs_diff"]["max"] == pytest.approx(0.3)
    assert measures["S:argmax"]["mean"] == 0.5 and measures["L:exact"]["mean"] == 0.75
    assert measures["E:cosine"]["min"] == pytest.approx(0.0) and measures["E:cosine"]["p50"] == 1
    assert measures["IDS:overlap"]["rows"] == 3 and measures["IDS:overlap"]["mean"] == 0.5
