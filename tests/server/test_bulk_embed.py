"""Bulk embedding: `tritonrepo-client embed --input ... --output ...` and
EmbeddingClient.embed_iter against the real server, both protocols."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import client_cli
from tests.sentences import SENTENCES
from tritonrepo_client import EmbeddingClient
from tritonrepo_client.embedding import BadText

pytestmark = pytest.mark.server
PROTOCOLS = ["http", "grpc"]
# 3 x the corpus plus a few odd lines: several requests of max_batch_size, more than
# --concurrency in flight, an empty line and a line with only spaces.
ONE_LINE = [t for t in SENTENCES if "\n" not in t and "\r" not in t]
LINES = [*ONE_LINE, "", "   ", *ONE_LINE, *ONE_LINE]


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.fixture(scope="module")
def expected(reference_embed) -> np.ndarray:
    return reference_embed(LINES)


def cli(server, protocol: str, *args: str):
    return client_cli("--url", server.options.url(protocol), "--protocol", protocol, *args)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_file_becomes_one_row_per_line(triton_server, expected, tmp_path, protocol):
    source, output = tmp_path / "texts.txt", tmp_path / "vectors.npy"
    source.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    out = cli(triton_server, protocol, "embed", "--input", str(source), "--output", str(output),
              "--concurrency", "3", "--batch-size", "16")  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert f"{len(LINES)} lines -> {output}" in out.stdout
    assert "texts/s" in out.stderr  # the progress bar's rate
    vectors = np.load(output)
    assert vectors.shape == (len(LINES), 384) and vectors.dtype == np.float32
    assert cosines(vectors, expected).min() >= 0.9999


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_bad_line_stops_the_job_naming_it_or_is_skipped(
    triton_server, expected, tmp_path, protocol
):
    lines = [t.encode() for t in LINES]
    lines[70] = b"caf\xe9 au lait"  # Latin-1, not UTF-8
    source, output = tmp_path / "texts.txt", tmp_path / "vectors.npy"
    source.write_bytes(b"\r\n".join(lines))  # Windows line endings, no final newline
    out = cli(triton_server, protocol, "embed", "--input", str(source), "--output", str(output),
              "--no-progress")  # fmt: skip
    assert out.returncode == 1
    assert f"{source}, line 71:" in out.stderr and "UTF-8" in out.stderr, out.stderr
    assert not output.exists() and not list(tmp_path.glob("*.partial"))
    out = cli(triton_server, protocol, "embed", "--input", str(source), "--output", str(output),
              "--no-progress", "--skip-bad-lines")  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert f"skipped {source}, line 71:" in out.stderr
    vectors = np.load(output)
    assert np.isnan(vectors[70]).all()
    keep = np.arange(len(LINES)) != 70
    assert cosines(vectors[keep], expected[keep]).min() >= 0.9999


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_embed_iter_streams_in_order(triton_server, expected, protocol):
    with EmbeddingClient(triton_server.options.url(protocol), protocol) as client:
        batches = list(client.embed_iter(iter(LINES), batch_size=10, concurrency=4))
        assert [len(b) for b in batches[:-1]] == [10] * (len(batches) - 1)
        assert cosines(np.concatenate(batches), expected).min() >= 0.9999
        bad = iter([*LINES[:25], b"\xff", *LINES[:5]])
        with pytest.raises(BadText) as info:
            list(client.embed_iter(bad, batch_size=10))
        assert info.value.index == 25
