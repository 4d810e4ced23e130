"""The `tritonrepo-client` command line against the real server."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import client_cli as cli
from tritonrepo.server.launcher import free_port
from tritonrepo_client import ClientError, TritonConnection

pytestmark = pytest.mark.server


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_embed_prints_vectors(triton_server, reference_embed, protocol):
    url = triton_server.options.url(protocol)
    texts = ["A man is eating food.", "Ünïcödé text"]
    out = cli("--url", url, "--protocol", protocol, "embed", "--precision", "6", *texts)
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["text"] for r in rows] == texts
    got = np.array([r["embedding"] for r in rows], dtype=np.float32)
    np.testing.assert_allclose(got, reference_embed(texts), atol=2e-6)


def test_similarity_matrix_from_stdin(triton_server, reference_embed):
    texts = ["A man is eating food.", "A man eats a meal.", "The stock market fell."]
    out = cli(
        "--url",
        triton_server.options.http_url,
        "embed",
        "--similarity",
        stdin="\n".join(texts) + "\n",
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[: len(texts)] == [f"[{i}] {t}" for i, t in enumerate(texts)]
    matrix = np.array([[float(v) for v in line.split()[1:]] for line in lines[-len(texts) :]])
    ref = reference_embed(texts)
    np.testing.assert_allclose(matrix, ref @ ref.T, atol=2e-4)
    assert matrix[0, 1] > matrix[0, 2]


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_unreachable_server_is_one_line(protocol):
    out = cli("--url", f"127.0.0.1:{free_port()}", "--protocol", protocol, "embed", "hi")
    assert out.returncode == 1
    assert out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith("error: cannot reach Triton at 127.0.0.1:")
    assert "Traceback" not in out.stderr


def test_the_grpc_port_with_http_is_one_line_naming_the_fix(triton_server):
    """Used to be `HTTPParseError: ('Expected HTTP/', 8)`."""
    out = cli("--url", triton_server.options.grpc_url, "embed", "hi")
    assert out.returncode == 1
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, out.stderr
    assert "Triton's gRPC port" in out.stderr and "--protocol grpc" in out.stderr, out.stderr
    out = cli("--url", triton_server.options.http_url, "--protocol", "grpc", "health")
    assert out.returncode == 1 and "FAIL live: liveness: " in out.stdout, out.stdout + out.stderr
    assert "Triton's HTTP port" in out.stdout and "--protocol http" in out.stdout, out.stdout


def session_is_open(server, correlation_id: str) -> bool:
    """Whether the server holds an open sequence for ``correlation_id``: an event without
    START is served then (and ends it here), and refused for an unknown one."""
    inputs = {"ITEM_ID": np.array([1], dtype=np.int64), "CANDIDATES": np.array([2, 3])}
    with TritonConnection(server.options.http_url) as conn:
        try:
            conn.infer("ctr_session", inputs, ["ITEM_IDS", "SCORES"], sequence_id=correlation_id,
                       sequence_start=False, sequence_end=True)  # fmt: skip
        except ClientError as exc:
            assert "START" in str(exc), exc
            return False
    return True


BAD_SESSION = (
    '{"item_id": 5, "candidates": [7, 8]}\n'
    '{"item_id": 6, "candidates": [9, 10]}\n'
    '{"item_id": "twelve", "candidates": [7]}\n'
    '{"item_id": 7, "candidates": [8]}\n'
)


def test_a_bad_session_file_line_is_named_and_nothing_is_sent(triton_server, tmp_path):
    events = tmp_path / "events.jsonl"
    events.write_text(BAD_SESSION)
    url = triton_server.options.http_url
    out = cli("--url", url, "session", "--correlation-id", "cli-bad-file", str(events))
    assert out.returncode == 1 and out.stdout == "", out.stdout
    assert f"{events}, line 3: field 'item_id' must be an integer item id, got 'twelve'" in (
        out.stderr
    )
    assert "nothing was sent" in out.stderr and "Traceback" not in out.stderr
    assert not session_is_open(triton_server, "cli-bad-file")


def test_a_bad_line_on_stdin_ends_the_session_with_the_event_before_it(triton_server):
    url = triton_server.options.http_url
    out = cli("--url", url, "session", "--correlation-id", "cli-bad-stdin", stdin=BAD_SESSION)
    assert out.returncode == 1
    assert [json.loads(line)["item_id"] for line in out.stdout.splitlines()] == [5, 6]
    assert "line 3: field 'item_id' must be an integer item id, got 'twelve' (str)" in out.stderr
    assert "the session was ended" in out.stderr and "Traceback" not in out.stderr
    assert not session_is_open(triton_server, "cli-bad-stdin")
    for bad, message in (
        ('{"item_id": 5, "candidates": [7, "x"]}', "field 'candidates' item 1 must be an integer"),
        ('{"item_id": true, "candidates": [7]}', "field 'item_id' must be an integer item id"),
        ('{"candidates": [7]}', "missing field 'item_id'"),
    ):
        out = cli("--url", url, "session", "--correlation-id", "cli-bad-first", stdin=bad)
        assert out.returncode == 1 and f"line 1: {message}" in out.stderr, out.stderr
        assert not session_is_open(triton_server, "cli-bad-first")
