"""The catalogue of Triton messages (tritonrepo_client.triton_messages), and the decisions of
health, healing and the repository client that follow from a message's kind. No server: the
texts are copied from Triton 2.51.0's source (branch r24.10 of triton-inference-server/core,
/server and /python_backend; file and function named at each) and from this project's own
stub-side code."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from tritonrepo_client.control import health
from tritonrepo_client.control.healing import healer
from tritonrepo_client.control.health_index import repository_findings
from tritonrepo_client.control.repository import ModelVersionState, RepositoryClient
from tritonrepo_client.errors import ClientError, ServerUnavailable, ServerUnreachable
from tritonrepo_client.triton_messages import (
    CATALOGUE,
    Kind,
    dead_stub_instances,
    item_indices,
    kinds_in,
    kinds_of,
)

# --- the texts, as their sources build them ---------------------------------------------------
# core src/model_repository_manager/model_lifecycle.cc, ModelLifeCycle::GetModel:
#   "'" + model_id.str() + "' version " + std::to_string(version) + " is not at ready state"
NOT_READY = "'text_embedding_normalize' version 2 is not at ready state"
# same function: "'" + model_id.str() + "' version " + std::to_string(version) + " is not found"
VERSION_NOT_FOUND = "'text_embedding_normalize' version 3 is not found"
# same function: "'" + model_id.str() + "' is not found"
MODEL_NOT_FOUND = "'text_embedding_normalize' is not found"
# core src/model_repository_manager/model_repository_manager.cc:
#   "Request for unknown model: '" + model_name + "' is not found"
UNKNOWN_MODEL = "Request for unknown model: 'no_such_model' is not found"
# server src/http_server.cc, HTTPAPIServer::RespondIfRestricted:
#   "This API is restricted, expecting header '" + header + "'"
HTTP_RESTRICTED = "This API is restricted, expecting header 'x-model-repository-key'"
# server src/grpc/grpc_server.cc, CommonCallData::Execute (and grpc/infer_handler.cc):
#   "This protocol is restricted, expecting header '" + restricted_kv_.first + "'"
GRPC_RESTRICTED = (
    "This protocol is restricted, expecting header 'triton-grpc-protocol-x-model-repository-key'"
)
# core src/scheduler_utils.cc, PriorityQueue::PolicyQueue::Enqueue:
#   request->LogRequest() + "Exceeds maximum queue size"; LogRequest() (src/infer_request.h)
#   is "[request id: " + id + "] " with "<id_unknown>" for a request without an ID
QUEUE_FULL = "[request id: <id_unknown>] Exceeds maximum queue size"
# core src/dynamic_batch_scheduler.cc, FinishRejectedCancelledRequests:
#   Status(Status::Code::UNAVAILABLE, "Request timeout expired")
QUEUE_TIMEOUT = "Request timeout expired"
# python_backend src/stub_launcher.cc, StubLauncher::ReceiveMessageFromStub:
#   std::string("Stub process '") + model_instance_name_ + "' is not healthy."
DEAD_STUB = "Stub process 'text_embedding_tokenize_0_0' is not healthy."
# python_backend src/python_be.cc, ModelInstanceState::SendMessageToStub:
#   "Stub process is not healthy."
DEAD_STUB_UNNAMED = "Stub process is not healthy."
# python_backend src/python_be.cc, ModelInstanceState::ShareCUDAMemoryPool:
#   std::string("Failed to share CUDA memory pool with stub process: ") + error
STUB_ERROR = "Failed to share CUDA memory pool with stub process: CUDA driver API error"
# tritonrepo/text/tokenization.py: f"{name}[{i}] is a {type(item).__name__}, not a string"
ITEM_ERROR = "TEXT[3] is a int, not a string"
# core src/model_repository_manager/model_lifecycle.cc, ModelLifeCycle::CreateModel's deleter:
#   model_info->state_reason_ = "unloaded"
UNLOADED = "unloaded"

EXAMPLES = {
    Kind.NOT_READY: [NOT_READY],
    Kind.NOT_FOUND: [VERSION_NOT_FOUND, MODEL_NOT_FOUND, UNKNOWN_MODEL],
    Kind.RESTRICTED: [HTTP_RESTRICTED, GRPC_RESTRICTED],
    Kind.QUEUE_FULL: [QUEUE_FULL],
    Kind.QUEUE_TIMEOUT: [QUEUE_TIMEOUT],
    Kind.DEAD_STUB: [DEAD_STUB, DEAD_STUB_UNNAMED],
    Kind.STUB_ERROR: [STUB_ERROR, DEAD_STUB, DEAD_STUB_UNNAMED],
    Kind.ITEM_ERROR: [ITEM_ERROR],
    Kind.UNLOADED: [UNLOADED],
}

# Similar texts that must not match the kind.
NEAR_MISSES = {
    Kind.NOT_READY: ["'m' version 2 is ready", "model is not ready"],
    Kind.NOT_FOUND: ["'m' version 3 was not loaded", "file not found"],
    Kind.RESTRICTED: ["This API is unrestricted", "restricted API: model-repository"],
    Kind.QUEUE_FULL: ["Exceeds maximum batch size", "exceeds maximum queue size"],
    Kind.QUEUE_TIMEOUT: ["Request timeout", "request timeout expired", "Deadline Exceeded"],
    Kind.DEAD_STUB: ["Stub process 'm_0_0' is healthy.", "Stub process died", STUB_ERROR],
    Kind.STUB_ERROR: ["Failed to share CUDA memory pool", "model process is not healthy"],
    Kind.ITEM_ERROR: ["TEXT has 3 items", "text[3] is bad", "TEXT[] is empty"],
    Kind.UNLOADED: ["unloaded by request", "failed to load: unloaded", "Unloaded"],
}


# --- the catalogue -----------------------------------------------------------------------------
def test_every_message_matches_its_example_and_gives_its_source() -> None:
    for message in CATALOGUE:
        assert message.kind in kinds_in(message.example), message
        assert message.pattern.search(message.example), message
        assert message.emitted_by.strip(), message


def test_the_catalogue_examples_are_the_source_texts() -> None:
    # Each catalogue example is one of the texts copied above from its source.
    copied = {text for texts in EXAMPLES.values() for text in texts}
    assert {m.example for m in CATALOGUE} <= copied


def test_unreachable_has_no_text() -> None:
    assert Kind.UNREACHABLE not in {m.kind for m in CATALOGUE}
    assert not kinds_in("failed to connect to all addresses; connection refused")


@pytest.mark.parametrize(
    ("kind", "text"), [(kind, text) for kind, texts in EXAMPLES.items() for text in texts]
)
def test_source_text_has_its_kind(kind: Kind, text: str) -> None:
    assert kind in kinds_in(text)
    if kind is Kind.UNLOADED:
        return  # a whole index reason, never part of an error
    # As the client reports it: the call, then Triton's text (an ensemble prefixes its name).
    assert kind in kinds_in(f"infer text_embedding failed: in ensemble 'text_embedding', {text}")


@pytest.mark.parametrize(
    ("kind", "text"), [(kind, text) for kind, texts in NEAR_MISSES.items() for text in texts]
)
def test_similar_text_does_not_have_the_kind(kind: Kind, text: str) -> None:
    assert kind not in kinds_in(text)


def test_source_texts_have_no_other_kind() -> None:
    assert kinds_in(NOT_READY) == {Kind.NOT_READY}
    assert kinds_in(UNKNOWN_MODEL) == {Kind.NOT_FOUND}
    assert kinds_in(HTTP_RESTRICTED) == {Kind.RESTRICTED}
    assert kinds_in(QUEUE_FULL) == {Kind.QUEUE_FULL}
    assert kinds_in(QUEUE_TIMEOUT) == {Kind.QUEUE_TIMEOUT}
    assert kinds_in(DEAD_STUB) == {Kind.DEAD_STUB, Kind.STUB_ERROR}
    assert kinds_in(STUB_ERROR) == {Kind.STUB_ERROR}
    assert kinds_in(ITEM_ERROR) == {Kind.ITEM_ERROR}
    assert kinds_in("the request failed for no reason named here") == frozenset()


def test_kinds_of_an_exception() -> None:
    unreachable = ServerUnreachable("cannot reach Triton at 127.0.0.1:1 over http (infer m)")
    assert kinds_of(unreachable) == {Kind.UNREACHABLE}
    assert kinds_of(ServerUnavailable(f"infer m failed: {QUEUE_TIMEOUT}")) == {Kind.QUEUE_TIMEOUT}
    assert Kind.UNREACHABLE not in kinds_of(ClientError("connection refused"))


def test_dead_stub_instances_in_order_without_repeats() -> None:
    text = (
        "in ensemble 'ctr_ranking', Stub process 'ctr_model_0_1' is not healthy.; "
        f"{DEAD_STUB} Stub process 'ctr_model_0_1' is not healthy."
    )
    assert dead_stub_instances(text) == ["ctr_model_0_1", "text_embedding_tokenize_0_0"]
    assert dead_stub_instances(DEAD_STUB_UNNAMED) == []
    assert dead_stub_instances(STUB_ERROR) == []


def test_item_indices() -> None:
    assert item_indices(f"infer text_embedding failed: {ITEM_ERROR}", "TEXT") == [3]
    # tritonrepo/image/preprocess.py: f"{name}[{i}] {exc}"
    two = "IMAGE[1] cannot be decoded; IMAGE[0] is empty; IMAGE[1] again"
    assert item_indices(two, "IMAGE") == [1, 0]
    assert item_indices(two, "TEXT") == []
    assert item_indices("TEXT[x] is bad", "TEXT") == []


# --- health: a probe refused for overload passes as busy --------------------------------------
class FakeConnection:
    """What health and the healer's probes call: the model is READY, declares a probe (one
    text, as text_embedding's config does), and every inference fails with ``error``."""

    def __init__(self, error: str) -> None:
        self.error = error
        self.inferences = 0

    def model_ready(self, model: str, version: str = "") -> bool:
        return True

    def model_config(self, model: str) -> dict[str, Any]:
        probe = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1, 1], "data": ["a"]}]}
        return {
            "parameters": {"tritonrepo_probe": {"string_value": json.dumps(probe)}},
            "output": [{"name": "EMBEDDING"}],
        }

    def infer(self, model: str, inputs: dict[str, np.ndarray], outputs: list[str], **_: Any):
        self.inferences += 1
        raise ServerUnavailable(f"infer {model} failed: {self.error}")


@pytest.mark.parametrize("text", [QUEUE_FULL, QUEUE_TIMEOUT])
def test_health_passes_an_overloaded_probe_as_busy(text: str) -> None:
    assert health.is_overload(text)
    ready, inference = health._model_checks(FakeConnection(text), "text_embedding", None)
    assert ready.ok and inference.ok
    assert inference.detail.startswith("busy, serving")


@pytest.mark.parametrize("text", [DEAD_STUB, NOT_READY, "Exceeds maximum batch size"])
def test_health_fails_a_probe_refused_otherwise(text: str) -> None:
    assert not health.is_overload(text)
    _, inference = health._model_checks(FakeConnection(text), "text_embedding", None)
    assert not inference.ok and text in inference.detail


def test_overload_markers_are_the_queue_texts() -> None:
    assert health.OVERLOAD_MARKERS == ("Exceeds maximum queue size", "Request timeout expired")


# --- healing: a dead stub is reloaded, an overload is not a failure ---------------------------
def test_heal_probe_counts_overload_as_serving() -> None:
    conn = FakeConnection(QUEUE_FULL)
    assert healer.probe(conn, "text_embedding") is None
    assert conn.inferences == 1  # the first refusal settles it


def test_heal_probe_reports_a_dead_stub() -> None:
    error = healer.probe(FakeConnection(DEAD_STUB), "text_embedding")
    assert error is not None and DEAD_STUB in error


class FakeRepository:
    """The index and configs a healer reads: ``loaded`` READY, each with ``backend``."""

    def __init__(self, loaded: dict[str, str]) -> None:
        self.backends = loaded
        self.connection = FakeConnection("unused")

    def index(self, timeout_s: float | None = None) -> list[ModelVersionState]:
        return [ModelVersionState(m, "1", "READY") for m in self.backends]

    def config(self, model: str, timeout_s: float | None = None) -> dict[str, Any]:
        return {"backend": self.backends[model]}


LOADED = {
    "text_embedding": "",
    "text_embedding_tokenize": "python",
    "ctr_session": "python",
    "ctr_model": "onnxruntime",
}


@pytest.mark.parametrize(
    ("model", "error", "steps"),
    [
        # the named stub's model, not the served model that reported it
        (
            "text_embedding",
            f"in ensemble 'text_embedding', {DEAD_STUB}",
            ["text_embedding_tokenize"],
        ),
        # an unnamed dead stub of a model that runs in stubs: that model
        ("ctr_session", DEAD_STUB_UNNAMED, ["ctr_session"]),
        ("ctr_session", STUB_ERROR, ["ctr_session"]),
        # an unnamed stub error of a model that does not run in stubs: nothing to reload
        ("text_embedding", DEAD_STUB_UNNAMED, []),
        # a named stub whose model is not loaded: the served model, which runs in stubs
        ("ctr_session", "Stub process 'gone_model_0_0' is not healthy.", ["ctr_session"]),
        # not a stub failure
        ("ctr_session", NOT_READY, []),
        ("ctr_session", QUEUE_TIMEOUT, []),
        ("text_embedding", ITEM_ERROR, []),
    ],
)
def test_healer_reloads_the_steps_a_dead_stub_names(model: str, error: str, steps: list[str]):
    heal = healer.Healer(FakeRepository(LOADED), models=[model])  # type: ignore[arg-type]
    assert heal.steps_to_restore(model, error) == steps


def test_dead_stub_models_are_the_instances_models() -> None:
    text = f"{DEAD_STUB} Stub process 'text_embedding_tokenize_0_1' is not healthy."
    assert healer.dead_stub_models(text) == ["text_embedding_tokenize"]
    assert healer._blames("text_embedding_tokenize", "text_embedding", text)
    assert not healer._blames("ctr_model", "ctr_ranking", text)
    assert healer._blames("ctr_model", "ctr_ranking", QUEUE_FULL)  # names no dead stub


# --- repository: a refused key is explained, other errors get the index's state ---------------
class RaisingConnection:
    def __init__(self, error: ClientError) -> None:
        self.error = error

    def call(self, what: str, fn: Any, timeout_s: float | None = None) -> Any:
        raise self.error


def repository(error: ClientError, key: str = "") -> RepositoryClient:
    repo = RepositoryClient("127.0.0.1:1", key=key)
    repo.connection = RaisingConnection(error)  # type: ignore[assignment]
    return repo


@pytest.mark.parametrize("text", [HTTP_RESTRICTED, GRPC_RESTRICTED])
def test_a_restricted_call_says_the_key_is_missing(text: str) -> None:
    with pytest.raises(ClientError) as refused:
        repository(ServerUnavailable(f"repository index failed: {text}")).index()
    assert "repository index refused: no repository key configured" in str(refused.value)
    assert text in str(refused.value)
    with pytest.raises(ClientError) as wrong:
        repository(ServerUnavailable(text), key="k").index()
    assert "the repository key sent was not accepted" in str(wrong.value)


def test_an_unrestricted_failure_passes_unchanged() -> None:
    error = ServerUnavailable(f"repository index failed: {MODEL_NOT_FOUND}")
    with pytest.raises(ClientError) as raised:
        repository(error).index()
    assert raised.value is error


@pytest.mark.parametrize(
    ("text", "with_state"),
    [(HTTP_RESTRICTED, False), ("failed to load 'm': model.py not found", True)],
)
def test_load_adds_the_index_state_unless_the_key_was_refused(text: str, with_state: bool):
    repo = repository(ClientError("unused"))

    def fail(*_: Any) -> None:
        raise ClientError(f"load m failed: {text}")

    repo._with_deadline = fail  # type: ignore[method-assign]
    repo._state_line = lambda model: "Triton reports m version 1: UNAVAILABLE"  # type: ignore[method-assign]
    with pytest.raises(ClientError) as raised:
        repo.load("m")
    assert str(raised.value).endswith("UNAVAILABLE") == with_state


# --- health index: "unloaded" is not a failed load ---------------------------------------------
@pytest.mark.parametrize(
    ("reason", "warned"), [(UNLOADED, False), ("failed to load: unloaded", True), ("x", True)]
)
def test_an_unloaded_version_is_not_reported(reason: str, warned: bool) -> None:
    rows = [ModelVersionState("other", "1", "UNAVAILABLE", reason)]
    findings = repository_findings(rows, rows, None, {"text_embedding"}, 0.1)
    assert bool(findings) == warned
