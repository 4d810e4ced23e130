"""The generic clients (:class:`PipelineClient`, :class:`AsyncPipelineClient`) and the
``infer`` command on the real server's ``text_embedding`` ensemble: the same answers as
:class:`EmbeddingClient` and sentence-transformers (``reference_embed``), the same answers and
errors from the thread and asyncio twins, and bad inputs refused before anything is sent
(Triton's inference statistics do not move)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.conftest import client_cli as cli
from tests.sentences import SENTENCES
from tests.server.test_client_parity import (
    DEADLINE_S,
    assert_all_same,
    async_outcome_of,
    outcome_of,
)
from tests.server.test_client_parity import (
    test_the_pairs_have_the_same_public_methods_and_signatures as assert_same_api,
)
from tritonrepo_client import (
    AsyncPipelineClient,
    AsyncPipelineSession,
    DeadlineExceeded,
    EmbeddingClient,
    PipelineClient,
    PipelineSession,
    VersionNotLoaded,
)

pytestmark = pytest.mark.server
PROTOCOLS = ["http", "grpc"]
MODEL = "text_embedding"
TEXTS = list(SENTENCES[:6])


def _count(server, model: str) -> int:
    client = httpclient.InferenceServerClient(server.triton_http_url)  # Triton's own port
    try:
        stats = client.get_inference_statistics(model)["model_stats"]
    finally:
        client.close()
    return sum(int(s["inference_stats"][k]["count"]) for s in stats for k in ("success", "fail"))


def requests_served(server, model: str = MODEL, settle_s: float = 2.0) -> int:
    """Requests ``model`` has answered or failed so far (Triton's inference statistics), read
    until two reads ``settle_s`` apart agree (up to 10 s): Triton counts a request after its
    response is sent, so a read right after an answer can precede its count (by more than
    0.3 s on two cores busy with another test file: seen with pytest-xdist, once a count 1 s
    late)."""
    last, deadline = _count(server, model), time.monotonic() + 10.0
    while time.monotonic() < deadline:
        time.sleep(settle_s)
        now = _count(server, model)
        if now == last:
            return now
        last = now
    return last


def test_the_pipeline_pair_has_the_same_public_methods_and_signatures():
    assert_same_api(PipelineClient, AsyncPipelineClient)
    assert_same_api(PipelineSession, AsyncPipelineSession)


def test_the_model_name_comes_first_and_must_be_given():
    with pytest.raises(ValueError, match="model must be a model name"):
        PipelineClient("")
    with pytest.raises(ValueError, match="model must be a model name"):
        AsyncPipelineClient(None)  # type: ignore[arg-type]


def calls(texts: list[str]) -> dict[str, tuple[str, dict[str, Any]]]:
    """``{label: (method, kwargs)}`` run on both twins, in order (the first fills the
    signature cache, so the deadline case times the inference, not the metadata)."""
    column = [[t] for t in texts]
    heavy = [["a long text " * 200]] * 64
    return {
        "infer": ("infer", {"inputs": {"TEXT": column}}),
        "infer outputs": (
            "infer",
            {"inputs": {"TEXT": np.array(column)}, "outputs": ["EMBEDDING"]},
        ),
        "infer version 1": ("infer", {"inputs": {"TEXT": column[:2]}, "model_version": 1}),
        "infer bulk priority": ("infer", {"inputs": {"TEXT": column[:2]}, "priority": 2}),
        "infer version 7": ("infer", {"inputs": {"TEXT": column[:1]}, "model_version": "7"}),
        "infer unknown input": ("infer", {"inputs": {"TXT": column}}),
        "infer unknown output": ("infer", {"inputs": {"TEXT": column}, "outputs": ["VECTORS"]}),
        "infer wrong dtype": ("infer", {"inputs": {"TEXT": np.ones((2, 1), np.float32)}}),
        "infer wrong rank": ("infer", {"inputs": {"TEXT": texts}}),
        "infer too many": ("infer", {"inputs": {"TEXT": [["x"]] * 65}}),
        "infer bad priority": ("infer", {"inputs": {"TEXT": column}, "priority": -1}),
        "infer deadline": ("infer", {"inputs": {"TEXT": heavy}, "timeout_s": 0.001}),
        "signature": ("signature", {}),
    }


def signature_view(value: Any) -> Any:
    """A signature as comparable data (an error as is)."""
    if isinstance(value, Exception):
        return value
    return {"describe": value.describe(), "max_batch_size": value.max_batch_size}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_pipeline_clients_agree_with_the_embedding_client_and_the_reference(
    triton_server, reference_embed, protocol
):
    url = triton_server.options.url(protocol)
    todo = calls(TEXTS)
    with PipelineClient(MODEL, url, protocol) as client:
        sync = {
            k: outcome_of(lambda m=m, kw=kw: getattr(client, m)(**kw))
            for k, (m, kw) in todo.items()
        }
        sync["signature"] = signature_view(sync["signature"])
        sync["max_batch_size"] = client.max_batch_size

    async def run() -> dict[str, Any]:
        async with AsyncPipelineClient(MODEL, url, protocol) as client:
            found = {}
            for label, (method, kwargs) in todo.items():
                found[label] = await async_outcome_of(
                    lambda m=method, kw=kwargs: getattr(client, m)(**kw)
                )
            found["signature"] = signature_view(found["signature"])
            found["max_batch_size"] = await client.max_batch_size()
            return found

    aio = asyncio.run(asyncio.wait_for(run(), DEADLINE_S))
    assert_all_same(sync, aio)

    with EmbeddingClient(url, protocol) as embedding:
        expected = embedding.embed(TEXTS)
    answer = sync["infer"]
    assert list(answer) == ["EMBEDDING", "TOKENS"] and answer["EMBEDDING"].dtype == np.float32
    assert answer["TOKENS"].dtype == np.int32 and answer["TOKENS"].shape == (len(TEXTS), 1)
    assert answer["EMBEDDING"].shape == (len(TEXTS), 384)
    np.testing.assert_allclose(answer["EMBEDDING"], expected, atol=1e-5)
    reference = reference_embed(TEXTS)
    for key in ("infer", "infer outputs"):
        cosines = np.sum(sync[key]["EMBEDDING"] * reference, axis=1)
        assert cosines.min() >= 0.9999, (key, cosines)
    cosines = np.sum(aio["infer version 1"]["EMBEDDING"] * reference[:2], axis=1)
    assert cosines.min() >= 0.9999, cosines
    assert sync["max_batch_size"] == 64
    assert sync["signature"]["describe"].splitlines() == [
        "model 'text_embedding' (max_batch_size 64)",
        "  input TEXT BYTES [batch, 1]",
        "  output EMBEDDING FP32 [batch, 384]",
        "  output TOKENS INT32 [batch, 1]",
    ]
    assert isinstance(sync["infer version 7"], VersionNotLoaded)
    assert str(sync["infer version 7"]) == (
        "version 7 of model 'text_embedding' is not loaded (loaded versions: 1)"
    )
    assert isinstance(sync["infer deadline"], DeadlineExceeded)
    assert "infer text_embedding: deadline of 0.001 s exceeded" in str(sync["infer deadline"])
    for key, words in {
        "infer unknown input": "has no input 'TXT': did you mean 'TEXT'?",
        "infer unknown output": "has no output 'VECTORS'",
        "infer wrong dtype": "input TEXT is BYTES (text or raw bytes), got a float32 array",
        "infer wrong rank": "input TEXT: expected 2 dims",
        "infer too many": "batch of 65 items",
        "infer bad priority": "priority",
    }.items():
        assert type(sync[key]) is ValueError and words in str(sync[key]), (key, sync[key])


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_bad_inputs_are_refused_before_anything_is_sent(triton_server, protocol):
    url = triton_server.options.url(protocol)
    with PipelineClient(MODEL, url, protocol) as client:
        client.signature()  # metadata and config only: not an inference
        before = requests_served(triton_server)
        for inputs in (
            {"TXT": [["a"]]},
            {"TEXT": [[1.5]]},
            {"TEXT": ["a"]},
            {"TEXT": [["a", "b"]]},
            {},
        ):
            with pytest.raises(ValueError):
                client.infer(inputs)
        assert requests_served(triton_server) == before
        client.infer({"TEXT": [["a"]]})
    assert requests_served(triton_server) == before + 1  # the statistics do count


# --- the infer command ---------------------------------------------------------------------
def base_args(server, protocol: str = "http") -> list[str]:
    return ["--url", server.options.url(protocol), "--protocol", protocol, "infer", MODEL]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_infer_prints_one_json_object(triton_server, reference_embed, protocol):
    texts = ["A man is eating food.", "Ünïcödé text"]
    value = json.dumps([[t] for t in texts], ensure_ascii=False)
    out = cli(*base_args(triton_server, protocol), "--input", f"TEXT={value}")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 1, out.stdout
    answer = json.loads(lines[0])
    assert list(answer) == ["EMBEDDING", "TOKENS"]
    assert all(len(row) == 1 and row[0] > 2 for row in answer["TOKENS"])  # [CLS] text [SEP]
    got = np.array(answer["EMBEDDING"], dtype=np.float32)
    cosines = np.sum(got * reference_embed(texts), axis=1)
    assert got.shape == (2, 384) and cosines.min() >= 0.9999, cosines


def test_infer_reads_npy_and_json_files_and_writes_npy_files(
    triton_server, reference_embed, tmp_path
):
    texts = list(SENTENCES[:3])
    np.save(tmp_path / "texts.npy", np.array([[t] for t in texts], dtype=str))
    (tmp_path / "texts.json").write_text(json.dumps([[t] for t in texts]))
    reference = reference_embed(texts)
    for source in ("texts.npy", "texts.json"):
        out_dir = tmp_path / f"out-{source}"
        out = cli(
            *base_args(triton_server),
            "--input",
            f"TEXT=@{tmp_path / source}",
            "--output",
            "EMBEDDING",
            "--output-dir",
            str(out_dir),
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.splitlines() == [
            f"EMBEDDING: float32 [3, 384] -> {out_dir / 'EMBEDDING.npy'}"
        ]
        got = np.load(out_dir / "EMBEDDING.npy", allow_pickle=False)
        cosines = np.sum(got * reference, axis=1)
        assert cosines.min() >= 0.9999, (source, cosines)


def test_bad_inputs_fail_in_one_line_and_send_nothing(triton_server, tmp_path):
    np.save(tmp_path / "rank1.npy", np.array(["a", "b"], dtype=str))
    cases = {
        "unknown tensor": (["--input", 'TXT=[["a"]]'], "has no input 'TXT': did you mean 'TEXT'?"),
        "wrong dtype": (["--input", "TEXT=[[1.5]]"], "input TEXT is BYTES"),
        "wrong rank": (["--input", f"TEXT=@{tmp_path / 'rank1.npy'}"], "expected 2 dims"),
        "not JSON": (["--input", "TEXT=[[hello]]"], "the value is not JSON"),
        "unknown output": (["--input", 'TEXT=[["a"]]', "--output", "X"], "has no output 'X'"),
        "missing file": (["--input", f"TEXT=@{tmp_path / 'no.npy'}"], "no.npy"),
    }
    before = requests_served(triton_server)
    for label, (args, words) in cases.items():
        out = cli(*base_args(triton_server), *args)
        assert out.returncode == 1, (label, out.stdout, out.stderr)
        assert out.stdout == "", label
        assert out.stderr.startswith("error: ") and out.stderr.count("\n") == 1, (label, out.stderr)
        assert words in out.stderr and "Traceback" not in out.stderr, (label, out.stderr)
    assert requests_served(triton_server) == before
    usage = cli(*base_args(triton_server), "--input", "TEXT")
    assert usage.returncode == 2 and "expected NAME=VALUE" in usage.stderr, usage.stderr


def test_infer_names_a_version_that_is_not_loaded(triton_server):
    out = cli(*base_args(triton_server, "grpc"), "--input", 'TEXT=[["a"]]', "--model-version", "7")
    assert out.returncode == 1
    assert out.stderr == (
        "error: version 7 of model 'text_embedding' is not loaded (loaded versions: 1)\n"
    )
