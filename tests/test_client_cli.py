"""The `tritonrepo-client` command line against the real server."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import client_cli as cli
from tritonrepo.launcher import free_port

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
