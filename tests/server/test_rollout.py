"""Zero-downtime rollout 1 → 2 → 1 of the encoder under mixed HTTP/gRPC load, canary failure,
and rollout by upload to a server whose repository lacks the new version.

Which version answered is decided against references computed outside Triton: version 1 is
sentence-transformers itself; version 2 (bf16-rounded weights) is the built artifact run by
ONNX Runtime between sentence-transformers' own tokenizer and pooling modules. The versions are
1 - cos ≥ 1e-6 apart on every probe, while a response is within 1e-7 of its own version.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch

from tests.conftest import client_cli, key_file, require_artifacts, server_options, wait_for
from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.server.launcher import TritonServer
from tritonrepo.text import spec
from tritonrepo_client import (
    EmbeddingCanary,
    EmbeddingClient,
    RepositoryClient,
    RolloutError,
    TritonConnection,
    VersionNotLoaded,
    rollback,
)
from tritonrepo_client.control.rollout import rollout

pytestmark = pytest.mark.server
CONTROL_SERVER_MODELS = (spec.ENSEMBLE,)
PROBES = [
    "A man is eating food.",
    "Rollouts must not drop a single request.",
    "Zürich and München are cities.",
    "Numbers like 3.14 and 42 matter too.",
    "short",
    "Dynamic batching joins requests of several clients into one batch.",
]
# Min cosine of a response with the reference of the version that produced it: the served ONNX
# Runtime graph and sentence-transformers in PyTorch agree to about 1e-7 (1 - cos), and to 2-3e-7
# on an AMD EPYC with this process's PyTorch threads. Max cosine between the two versions'
# references, for every probe: they differ by 1.9-2.4e-5 (bf16-rounded weights), so an answer
# matches exactly one version.
SAME = 1 - 2e-6
APART = 1 - 1e-5
ENCODER_DIR = MODEL_REPOSITORY / spec.ENCODER_MODEL
STEADY_ANSWERS = 4  # answers per ensemble client that make a steady state (3 states: >= 48)
STEADY_DEADLINE_S = 120.0


@pytest.fixture(scope="module")
def references(reference_model) -> dict[int, np.ndarray]:
    """{version: FP32 [len(PROBES), 384]} computed outside Triton."""
    from sentence_transformers.models import Normalize

    features = reference_model.tokenize(PROBES)
    session = ort.InferenceSession(str(ENCODER_DIR / "2" / "model.onnx"))
    (pooled,) = session.run(  # the graph's masked mean (sentence-transformers' Pooling)
        None,
        {
            "input_ids": features["input_ids"].numpy(),
            "attention_mask": features["attention_mask"].numpy(),
        },
    )
    v2 = Normalize()({"sentence_embedding": torch.from_numpy(pooled)})["sentence_embedding"]
    v2 = v2.numpy()
    v1 = reference_model.encode(PROBES, normalize_embeddings=True)
    assert float((v1 * v2).sum(axis=1).max()) < APART, "versions must be distinguishable"
    return {1: v1, 2: v2}


def versions_matching(embedding: np.ndarray, text_index: int, refs: dict[int, np.ndarray]) -> set:
    return {v for v, ref in refs.items() if float(embedding @ ref[text_index]) >= SAME}


@dataclass
class Observation:
    sent: float
    done: float
    client: str
    versions: set | None = None  # versions whose reference the answer matched
    error: str | None = None
    pinned: int | None = None


@dataclass
class LoadRun:
    """Constant load from several clients until stopped; every answer is classified."""

    server: TritonServer
    refs: dict[int, np.ndarray]
    observations: list[Observation] = field(default_factory=list)
    not_ready_samples: int = 0
    ready_samples: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, obs: Observation) -> None:
        with self.lock:
            self.observations.append(obs)

    def ensemble_worker(self, name: str, protocol: str) -> None:
        with EmbeddingClient(self.server.options.url(protocol), protocol) as client:
            i = 0
            while not self.stop.is_set():
                k = i % len(PROBES)
                sent = time.monotonic()
                try:
                    emb = client.embed([PROBES[k]])[0]
                    self.record(
                        Observation(
                            sent, time.monotonic(), name, versions_matching(emb, k, self.refs)
                        )
                    )
                except Exception as exc:
                    self.record(Observation(sent, time.monotonic(), name, error=str(exc)))
                i += 1

    def pinned_worker(self, version: int) -> None:
        """Requests to the encoder pinned to ``version``, normalised here as the reference
        does."""
        from tritonrepo.text.pooling import l2_normalize

        with TritonConnection(self.server.options.grpc_url, "grpc") as conn:
            i = 0
            while not self.stop.is_set():
                k = i % len(PROBES)
                sent = time.monotonic()
                text = np.array([[PROBES[k].encode()]], dtype=object)
                try:
                    tokens = conn.infer(
                        spec.TOKENIZE_MODEL, {"TEXT": text}, ["input_ids", "attention_mask"]
                    )
                    out = conn.infer(
                        spec.ENCODER_MODEL,
                        tokens,
                        [spec.ENCODER_OUTPUT],
                        model_version=str(version),
                    )
                    emb = l2_normalize(out[spec.ENCODER_OUTPUT])[0]
                    self.record(
                        Observation(
                            sent,
                            time.monotonic(),
                            f"pinned-{version}",
                            versions_matching(emb, k, self.refs),
                            pinned=version,
                        )
                    )
                except VersionNotLoaded as exc:
                    self.record(
                        Observation(
                            sent,
                            time.monotonic(),
                            f"pinned-{version}",
                            error=f"not loaded: {exc}",
                            pinned=version,
                        )
                    )
                    time.sleep(0.05)
                except Exception as exc:
                    self.record(
                        Observation(
                            sent,
                            time.monotonic(),
                            f"pinned-{version}",
                            error=str(exc),
                            pinned=version,
                        )
                    )
                i += 1

    def readiness_watcher(self) -> None:
        with TritonConnection(self.server.options.grpc_url, "grpc") as conn:
            while not self.stop.is_set():
                if conn.model_ready(spec.ENSEMBLE):
                    self.ready_samples += 1
                else:
                    self.not_ready_samples += 1
                time.sleep(0.01)

    def __enter__(self) -> LoadRun:
        targets = [
            (self.ensemble_worker, ("http-0", "http")),
            (self.ensemble_worker, ("http-1", "http")),
            (self.ensemble_worker, ("grpc-0", "grpc")),
            (self.ensemble_worker, ("grpc-1", "grpc")),
            (self.pinned_worker, (1,)),
            (self.pinned_worker, (2,)),
            (self.readiness_watcher, ()),
        ]
        self.threads = [threading.Thread(target=t, args=a, daemon=True) for t, a in targets]
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=60)

    def between(self, start: float, end: float, ensemble_only: bool = True) -> list[Observation]:
        """Observations sent and answered within [start, end]."""
        with self.lock:
            return [
                o for o in self.observations
                if start <= o.sent and o.done <= end and (o.pinned is None or not ensemble_only)
            ]  # fmt: skip


def repo_for(server: TritonServer, protocol: str = "http") -> RepositoryClient:
    return RepositoryClient(
        server.options.url(protocol), protocol, key=server.options.repository_key
    )


def steady(load: LoadRun, since: float, what: str) -> float:
    """Wait until every ensemble client has ``STEADY_ANSWERS`` requests sent and answered since
    ``since`` (a steady state), for at most ``STEADY_DEADLINE_S``; the time then.

    Raises:
        AssertionError: not within the deadline (``what`` says which state).
    """

    def reached() -> bool:
        clients = [o.client for o in load.between(since, time.monotonic())]
        return len(set(clients)) == 4 and min(map(clients.count, set(clients))) >= STEADY_ANSWERS

    wait_for(what, reached, STEADY_DEADLINE_S)
    return time.monotonic()


def test_rollout_and_rollback_under_load_drop_nothing(control_server, references):
    with LoadRun(control_server, references) as load, repo_for(control_server, "grpc") as repo:
        t0 = steady(load, 0.0, "steady state on version 1")
        to_v2 = rollout(repo, spec.ENCODER_MODEL, 2)
        t1 = time.monotonic()
        t2 = steady(load, t1, "steady state on version 2")
        to_v1 = rollback(repo, spec.ENCODER_MODEL)
        t3 = time.monotonic()
        t4 = steady(load, t3, "steady state on version 1 again")
        assert repo.versions(spec.ENCODER_MODEL) == [1]
    ensemble = [o for o in load.observations if o.pinned is None]
    pinned = [o for o in load.observations if o.pinned is not None]

    failures = [o for o in ensemble if o.error]
    assert not failures, f"{len(failures)} of {len(ensemble)} failed, e.g. {failures[0]}"
    assert len(ensemble) >= 40 and {o.client for o in ensemble} == {
        "http-0", "http-1", "grpc-0", "grpc-1"
    }  # fmt: skip
    ambiguous = [o for o in ensemble if len(o.versions) != 1]
    assert not ambiguous, f"answers matching no or both versions: {ambiguous[:3]}"

    def served(observations):
        return {v for o in observations for v in o.versions}

    assert served(load.between(0, t0)) == {1}
    assert served(load.between(t1, t2)) == {2}, "after the rollout only version 2 answers"
    assert served(load.between(t3, t4)) == {1}, "after the rollback only version 1 answers"
    assert load.between(t1, t2) and load.between(t3, t4)

    for obs in pinned:  # a pinned request is answered by its version or refused as not loaded
        if obs.error:
            assert obs.error.startswith("not loaded"), obs
        else:
            assert obs.versions == {obs.pinned}, obs
    assert any(o.pinned == 2 and not o.error for o in pinned), "version 2 was never reachable"

    assert load.not_ready_samples == 0 and load.ready_samples > 100
    for report in (to_v2, to_v1):
        assert report.canary is not None and report.canary.ok
        assert report.dependents == {spec.ENSEMBLE: "READY throughout"}
    assert (to_v2.previous, to_v2.version, to_v1.previous, to_v1.version) == ([1], 2, [2], 1)
    print(
        f"rollout {to_v2.seconds:.1f} s, rollback {to_v1.seconds:.1f} s, "
        f"{len(ensemble)} ensemble + {len(pinned)} pinned requests, 0 failed"
    )


def test_failed_canary_restores_the_serving_version(control_server, references):
    with repo_for(control_server) as repo:
        strict = EmbeddingCanary(PROBES, min_cosine=APART)
        with pytest.raises(RolloutError, match="failed at canary: canary rejected version 2"):
            rollout(repo, spec.ENCODER_MODEL, 2, canary=strict)
        assert repo.versions(spec.ENCODER_MODEL, ("READY", "UNLOADING")) == [1]
    with EmbeddingClient(control_server.options.http_url) as client:
        emb = client.embed(PROBES)
    assert all(versions_matching(emb[i], i, references) == {1} for i in range(len(PROBES)))


def test_version_missing_from_the_repository_is_refused(control_server):
    with repo_for(control_server) as repo:
        with pytest.raises(RolloutError, match="failed at stage: version 7 did not become READY"):
            rollout(repo, spec.ENCODER_MODEL, 7)
        assert repo.versions(spec.ENCODER_MODEL) == [1]
        assert repo.ready(spec.ENSEMBLE)
        with pytest.raises(RolloutError, match="already serves version 1"):
            rollout(repo, spec.ENCODER_MODEL, 1)


@pytest.fixture(scope="module")
def server_without_v2(tmp_path_factory):
    """A server of text_embedding whose repository holds only encoder version 1 (as on a
    remote host): a copy of text_embedding's model folders, without the others."""
    require_artifacts()
    repo = Path(tmp_path_factory.mktemp("remote")) / "model_repository"
    for model in (spec.ENSEMBLE, spec.TOKENIZE_MODEL, spec.ENCODER_MODEL, spec.NORMALIZE_MODEL):
        shutil.copytree(MODEL_REPOSITORY / model, repo / model,
                        ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    shutil.rmtree(repo / spec.ENCODER_MODEL / "2")
    options = server_options("rollout-upload", model_repository=repo, models=(spec.ENSEMBLE,))
    with TritonServer(options) as server:
        yield server


def test_rollout_by_upload_and_rollback(server_without_v2, references, tmp_path):
    only_v2 = tmp_path / "only_v2"
    shutil.copytree(ENCODER_DIR / "2", only_v2 / "2")
    with repo_for(server_without_v2, "grpc") as repo:
        with pytest.raises(RolloutError, match=r"only_v2/1 has no files"):
            rollout(repo, spec.ENCODER_MODEL, 2, source_dir=only_v2)
        assert repo.versions(spec.ENCODER_MODEL) == [1]

        report = rollout(repo, spec.ENCODER_MODEL, 2, source_dir=ENCODER_DIR)
        assert report.canary.ok and repo.versions(spec.ENCODER_MODEL) == [2]
        with EmbeddingClient(server_without_v2.options.grpc_url, "grpc") as client:
            emb = client.embed(PROBES)
        assert all(versions_matching(emb[i], i, references) == {2} for i in range(len(PROBES)))

        rollback(repo, spec.ENCODER_MODEL, source_dir=ENCODER_DIR)
        assert repo.versions(spec.ENCODER_MODEL) == [1]
        with EmbeddingClient(server_without_v2.options.http_url) as client:
            emb = client.embed(PROBES)
        assert all(versions_matching(emb[i], i, references) == {1} for i in range(len(PROBES)))


def test_custom_canary_that_breaks_still_restores(control_server):
    class BrokenCanary:
        def compare(self, conn, model, old, new):
            raise ValueError("probe file unreadable")

    with repo_for(control_server) as repo:
        with pytest.raises(RolloutError, match="failed at canary: probe file unreadable; restored"):
            rollout(repo, spec.ENCODER_MODEL, 2, canary=BrokenCanary())
        assert repo.versions(spec.ENCODER_MODEL, ("READY", "UNLOADING")) == [1]


def test_cli_rollout_with_a_tensor_probe_file(control_server, tmp_path):
    """--probe-file: raw encoder inputs; bf16 weights move sentence_embedding by more than 1e-6
    but far less than 0.1, so the strict check rejects and the loose one accepts."""
    ids = np.array([[101, 7592, 2088, 102]], dtype=np.int64)
    probe = tmp_path / "probe.npz"
    np.savez(probe, input_ids=ids, attention_mask=np.ones_like(ids))
    base = ["--url", control_server.options.grpc_url, "--protocol", "grpc",
            "--repository-key-file", str(key_file(control_server, tmp_path))]  # fmt: skip
    probe_args = ["--probe-file", str(probe), "--output", "sentence_embedding", "--rtol", "0"]

    def run(*args: str) -> subprocess.CompletedProcess:
        return client_cli(*base, *args)

    out = run("rollout", spec.ENCODER_MODEL, "--version", "2", *probe_args, "--atol", "1e-6")
    assert out.returncode == 1
    assert "canary rejected version 2: sentence_embedding max abs diff" in out.stderr, out.stderr
    out = run("rollout", spec.ENCODER_MODEL, "--version", "2", *probe_args, "--atol", "0.1")
    assert out.returncode == 0, out.stderr
    assert "now serving version 2 (was [1])" in out.stdout
    out = run("rollback", spec.ENCODER_MODEL, *probe_args, "--atol", "0.1")
    assert out.returncode == 0, out.stderr
    with repo_for(control_server) as repo:
        assert repo.versions(spec.ENCODER_MODEL) == [1]
