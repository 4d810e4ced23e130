"""The tests every stateful described pipeline (``[sequence]``) gets:
``tests/pipelines/test_<name>.py`` (written by ``tritonrepo-new``) subclasses
:class:`SessionSuite` with its description.

The served session model (a server of the class's own, CPU configs, the pipeline alone: the
launcher loads the core model it calls) is compared, event by event, with the session replayed
in this process in the order it is served (:class:`builders.pipeline.in_process.Replay`: each
event's step on the state so far, the built ``model.onnx`` in ONNX Runtime on its outputs and
the state the core returned for the previous event, postprocess); with a hand-written step
class (``[session] step_class``), with ``[session] reference`` instead. Over HTTP and gRPC: the
sample sessions interleaved, and run concurrently; every answer equals ``[session] reference``
on the whole session (when the description gives one: the model's own streaming API, or a
stateless run), so a step or model that no longer carries the state fails here even when the
replay carries the same mistake; each declared ``[[sequence.state]]`` changes across events;
END frees a session (continuing it is refused, starting it again begins afresh); a request
without START for an unknown ID is refused; a bad event gets its own error and changes no
state; the declared health probe passes; a session idle past the idle timeout (1 s here, by a
config override) is refused, and the server still serves.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from builders.pipeline.in_process import Replay
from tests.conftest import client_cli, server_options, wait_for
from tests.pipeline_suite import DescribedSuite, assert_same, bad_value
from tritonrepo.description import Pipeline, import_ref
from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.server.launcher import TritonServer
from tritonrepo_client import AsyncPipelineClient, ClientError, PipelineClient
from tritonrepo_client.connection import TritonConnection
from tritonrepo_client.control.health import check_health

PROTOCOLS = ["http", "grpc"]
Answers = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]  # a session -> its answers
CONCURRENCY = 8  # sessions sent at once, each from its own thread
IDLE_TEST_S = 1.0  # the idle timeout the expiry test loads the model with


class SessionSuite(DescribedSuite):
    """The tests of a stateful described pipeline (the module docstring)."""

    @pytest.fixture(scope="class")
    @classmethod
    def sessions(cls, pipeline: Pipeline) -> list[dict[str, np.ndarray]]:
        return [{k: np.asarray(v) for k, v in s.items()} for s in import_ref(pipeline.samples)()]

    @pytest.fixture(scope="class")
    @classmethod
    def replay(cls, pipeline: Pipeline) -> Answers:
        """The answers to a session's events, one row per event: the replay (the step and
        the built core), or the reference for a hand-written step class (no functions)."""
        core = pipeline.core
        path = MODEL_REPOSITORY / core.model / str(core.versions[0]) / "model.onnx"
        if not path.is_file():
            pytest.fail(f"{path} is missing: run `make artifacts` (make test does it)")
        if pipeline.core_state is not None:  # a step class: its reference is the answer
            reference = cls.reference_of(pipeline)
            assert reference is not None
            return reference
        return Replay(pipeline, path)

    @staticmethod
    def reference_of(pipeline: Pipeline) -> Answers | None:
        """``[session] reference`` as a function of a whole session, or None."""
        assert pipeline.session is not None
        ref = pipeline.session.reference
        if ref is None:
            return None
        function = import_ref(ref)
        return lambda events: dict(function({k: np.asarray(v) for k, v in events.items()}))

    @pytest.fixture(scope="class")
    @classmethod
    def server(cls, pipeline: Pipeline, replay: Answers):
        options = server_options(f"pipeline-{pipeline.name}", models=(pipeline.models[0],))
        with TritonServer(options) as server:
            yield server

    # --- helpers --------------------------------------------------------------------------------
    @staticmethod
    def new_id(pipeline: Pipeline, tag: str) -> int | str:
        """A fresh correlation ID of the description's kind."""
        assert pipeline.sequence is not None
        if pipeline.sequence.correlation_id == "uint64":
            return 1 + secrets.randbelow(2**63 - 1)
        return f"{tag}-{secrets.token_hex(6)}"

    @staticmethod
    def event(events: dict[str, np.ndarray], j: int) -> dict[str, np.ndarray]:
        return {k: v[j : j + 1] for k, v in events.items()}

    @staticmethod
    def send(conn: TritonConnection, pipeline: Pipeline, inputs: dict[str, np.ndarray], key: Any,
             start: bool = False, end: bool = False) -> dict[str, np.ndarray]:  # fmt: skip
        """One event (``[1, ...]`` tensors) of session ``key``; its answer ``[1, ...]`` (a
        pipeline without a batch dim, ``max_batch_size = 0``, sends and gets it without)."""
        flat = pipeline.max_batch_size == 0
        got = conn.infer(
            pipeline.models[0], {k: v[0] for k, v in inputs.items()} if flat else inputs,
            [t.name for t in pipeline.outputs],
            sequence_id=key, sequence_start=start, sequence_end=end,
        )  # fmt: skip
        return {k: v[None] for k, v in got.items()} if flat else got

    @staticmethod
    def expected(replay: Answers, events: dict[str, np.ndarray], j: int) -> dict[str, np.ndarray]:
        """The answer to event ``j``: the session replayed over events 0..j, event by event."""
        answers = replay({k: v[: j + 1] for k, v in events.items()})
        return {k: np.asarray(v)[j : j + 1] for k, v in answers.items()}

    def run_session(self, conn, pipeline, replay, events, tag: str) -> None:
        key = self.new_id(pipeline, tag)
        count = len(next(iter(events.values())))
        for j in range(count):
            got = self.send(conn, pipeline, self.event(events, j), key, j == 0, j == count - 1)
            assert_same(got, self.expected(replay, events, j), f"{tag} event {j}")

    # --- tests ----------------------------------------------------------------------------------
    @pytest.mark.parametrize("protocol", PROTOCOLS)
    def test_interleaved_sessions_each_equal_the_replay_of_their_history(
        self, pipeline, sessions, replay, server, protocol
    ):
        keys = [self.new_id(pipeline, f"interleaved{i}") for i in range(len(sessions))]
        counts = [len(next(iter(s.values()))) for s in sessions]
        with TritonConnection(server.options.url(protocol), protocol) as conn:
            for j in range(max(counts)):  # event j of every session, then event j + 1 ...
                for i, (events, key) in enumerate(zip(sessions, keys, strict=True)):
                    if j >= counts[i]:
                        continue
                    got = self.send(conn, pipeline, self.event(events, j), key, j == 0,
                                    j == counts[i] - 1)  # fmt: skip
                    where = f"{protocol}, session {i} event {j}"
                    assert_same(got, self.expected(replay, events, j), where)

    @pytest.mark.parametrize("protocol", PROTOCOLS)
    def test_every_answer_equals_the_reference_on_the_whole_session(
        self, pipeline, sessions, server, protocol
    ):
        """``[session] reference``, independent of the replay: one call per session, its row
        ``j`` against the served answer to event ``j``."""
        reference = self.reference_of(pipeline)
        if reference is None:
            pytest.skip("the description gives no [session] reference")
        with TritonConnection(server.options.url(protocol), protocol) as conn:
            for i, events in enumerate(sessions):
                want = reference(events)
                key = self.new_id(pipeline, f"reference{i}")
                count = len(next(iter(events.values())))
                for j in range(count):
                    got = self.send(conn, pipeline, self.event(events, j), key, j == 0,
                                    j == count - 1)  # fmt: skip
                    row = {k: np.asarray(v)[j : j + 1] for k, v in want.items()}
                    assert_same(got, row, f"{protocol}, session {i} event {j} vs the reference")

    def test_every_declared_state_changes_across_events(self, pipeline, sessions, replay):
        """Each ``[[sequence.state]]`` output differs from the state fed in on some event of
        the samples (in this process): a pair that is not the model's state stays as fed."""
        assert pipeline.session is not None
        if not pipeline.session.states or not isinstance(replay, Replay):
            pytest.skip("no [[sequence.state]] fed by the generated session model")
        runs = [run for events in sessions for run in replay.runs(events)]
        for s in pipeline.session.states:
            changed = [not np.array_equal(r.core[s.output], r.feeds[s.input]) for r in runs]
            assert any(changed), f"'{s.output}' never differs from the '{s.input}' fed in"

    def test_concurrent_sessions_each_get_their_own_answers(
        self, pipeline, sessions, replay, server
    ):
        def one(n: int) -> None:
            with TritonConnection(server.options.url("http")) as conn:
                self.run_session(conn, pipeline, replay, sessions[n % len(sessions)], f"c{n}")

        with ThreadPoolExecutor(CONCURRENCY) as pool:
            list(pool.map(one, range(2 * CONCURRENCY)))

    @pytest.mark.parametrize("protocol", PROTOCOLS)
    def test_end_frees_the_session_and_start_begins_afresh(
        self, pipeline, sessions, replay, server, protocol
    ):
        events = sessions[0]
        key = self.new_id(pipeline, "ended")
        with TritonConnection(server.options.url(protocol), protocol) as conn:
            self.send(conn, pipeline, self.event(events, 0), key, start=True)
            self.send(conn, pipeline, self.event(events, 1), key, end=True)
            with pytest.raises(ClientError, match="START"):
                self.send(conn, pipeline, self.event(events, 2), key)
            got = self.send(conn, pipeline, self.event(events, 2), key, start=True, end=True)
        third_alone = {k: v[2:3] for k, v in events.items()}
        assert_same(got, self.expected(replay, third_alone, 0), "restarted session")

    @pytest.mark.parametrize("protocol", PROTOCOLS)
    def test_a_request_without_start_for_an_unknown_id_is_refused(
        self, pipeline, sessions, server, protocol
    ):
        key = self.new_id(pipeline, "never-started")
        with (
            TritonConnection(server.options.url(protocol), protocol) as conn,
            pytest.raises(ClientError, match="START") as info,
        ):
            self.send(conn, pipeline, self.event(sessions[0], 0), key)
        assert pipeline.models[0] in str(info.value), info.value
        assert server.process is not None and server.process.poll() is None

    def test_a_bad_event_fails_alone_and_changes_no_state(self, pipeline, sessions, replay, server):
        events = sessions[0]
        bad = bad_value(pipeline, self.event(events, 1))
        key = self.new_id(pipeline, "bad")
        with TritonConnection(server.options.url("http")) as conn:
            self.send(conn, pipeline, self.event(events, 0), key, start=True)
            with pytest.raises(ClientError) as info:
                self.send(conn, pipeline, bad, key)
            assert pipeline.models[0] in str(info.value), info.value
            got = self.send(conn, pipeline, self.event(events, 1), key, end=True)
        assert_same(got, self.expected(replay, events, 1), "the event after the bad one")

    @pytest.mark.parametrize("protocol", PROTOCOLS)
    def test_a_pipeline_client_session_sets_start_and_end(
        self, pipeline, sessions, replay, server, protocol
    ):
        """:meth:`PipelineClient.session`: START with the first event, END with the one sent
        with ``end=True``, the answers of the replay; the ended stream refuses another event
        without sending it, and the server refuses the same ID without START (it ended)."""
        events = sessions[0]
        count = len(next(iter(events.values())))
        key = self.new_id(pipeline, f"client-{protocol}")
        with PipelineClient(pipeline.models[0], server.options.url(protocol), protocol) as client:
            session = client.session(key)
            for j in range(count):
                got = session.send(self.event(events, j), end=j == count - 1)
                assert_same(got, self.expected(replay, events, j), f"{protocol} event {j}")
            with pytest.raises(RuntimeError, match="has ended"):
                session.send(self.event(events, 0))
            with pytest.raises(ClientError, match="START"):
                client.infer(self.event(events, 0), sequence_id=key)
            with pytest.raises(ValueError, match="need a sequence_id"):
                client.infer(self.event(events, 0), sequence_start=True)

    def test_an_asyncio_session_answers_as_the_thread_one(self, pipeline, sessions, replay, server):
        """:meth:`AsyncPipelineClient.session` over gRPC: the same answers, event by event."""
        events = sessions[0]
        count = len(next(iter(events.values())))
        key = self.new_id(pipeline, "asyncio")

        async def run() -> list[dict[str, np.ndarray]]:
            url = server.options.url("grpc")
            async with AsyncPipelineClient(pipeline.models[0], url, "grpc") as client:
                session = client.session(key)
                return [await session.send(self.event(events, j), end=j == count - 1)
                        for j in range(count)]  # fmt: skip

        for j, got in enumerate(asyncio.run(run())):
            assert_same(got, self.expected(replay, events, j), f"asyncio event {j}")

    def test_the_cli_sends_a_stream_event_by_event(self, pipeline, sessions, replay, server):
        """``tritonrepo-client infer --sequence-id ID --start`` / ``--end``: the answers of the
        replay, event by event; ``--start`` without an ID is a usage error, nothing sent."""
        events = sessions[0]
        count = min(3, len(next(iter(events.values()))))
        key = str(self.new_id(pipeline, "cli"))
        for j in range(count):
            flags = ["--start"] * (j == 0) + ["--end"] * (j == count - 1)
            values = [f"{k}={json.dumps(v.tolist())}" for k, v in self.event(events, j).items()]
            args = [a for value in values for a in ("--input", value)]
            done = client_cli("--url", server.options.http_url, "infer", pipeline.models[0],
                              "--sequence-id", key, *flags, *args)  # fmt: skip
            assert done.returncode == 0, done.stderr
            got = {k: np.asarray(v) for k, v in json.loads(done.stdout).items()}
            want = self.expected(replay, events, j)
            assert_same({k: got[k].astype(np.asarray(v).dtype) for k, v in want.items()}, want,
                        f"cli event {j}")  # fmt: skip
        refused = client_cli("--url", server.options.http_url, "infer", pipeline.models[0],
                             "--start", *args)  # fmt: skip
        assert refused.returncode == 1 and "need --sequence-id" in refused.stderr

    def test_the_declared_health_probe_passes(self, pipeline, server):
        with TritonConnection(server.options.http_url) as conn:
            checks = check_health(conn, [pipeline.models[0]])
        assert all(c.ok for c in checks), [c for c in checks if not c.ok]
        assert any(c.name == f"{pipeline.models[0]} inference" for c in checks), checks

    def test_zz_an_idle_session_expires_with_a_clear_error(
        self, pipeline, sessions, replay, server
    ):
        """Runs last: the session model is reloaded with a 1 s idle timeout (a load-API
        config override), then restored from its file."""
        from tritonrepo_client import RepositoryClient

        model = pipeline.models[0]
        # Closed at the end: an open keep-alive connection holds up the server's stop.
        with RepositoryClient(server.options.http_url, key=server.options.repository_key) as repo:
            config = repo.config(model)
            config["sequence_batching"]["max_sequence_idle_microseconds"] = int(IDLE_TEST_S * 1e6)
            repo.load(model, config=config)
            events = sessions[0]
            try:
                with TritonConnection(server.options.http_url) as conn:
                    key = self.new_id(pipeline, "idle")
                    self.send(conn, pipeline, self.event(events, 0), key, start=True)
                    sent = time.monotonic()
                    # Idleness is the condition under test: nothing may touch the session.
                    wait_for("the idle timeout and Triton's reaper to pass",
                             lambda: time.monotonic() - sent > 3 * IDLE_TEST_S, 10)  # fmt: skip
                    with pytest.raises(ClientError, match="START"):
                        self.send(conn, pipeline, self.event(events, 1), key)
                    got = self.send(
                        conn, pipeline, self.event(events, 1), key, start=True, end=True
                    )
                second_alone = {k: v[1:2] for k, v in events.items()}
                assert_same(got, self.expected(replay, second_alone, 0), "a fresh session")
            finally:
                repo.unload(model)
                repo.load(model)
