"""The Triton error texts this project acts on, in one catalogue: code reads a :class:`Kind`,
never a string.

Triton reports most failures only as text (gRPC status details, the HTTP body's ``error``), and
several decisions depend on which failure it was: the health check passes a probe that Triton
refused for its queue limits (:data:`Kind.QUEUE_FULL`, :data:`Kind.QUEUE_TIMEOUT`), the healer
reloads a step whose stub died (:data:`Kind.DEAD_STUB`), the repository client says which key was
missing (:data:`Kind.RESTRICTED`), the client turns a request for a version that is not loaded
into ``VersionNotLoaded`` (:data:`Kind.NOT_READY`, :data:`Kind.NOT_FOUND`), and the bulk client
names the refused text of a batch (:data:`Kind.ITEM_ERROR`).

Each :class:`Message` holds the pattern matched, one exact text as emitted (Triton 2.51.0 =
branch ``r24.10`` of triton-inference-server/core, /server and /python_backend, or this
project's stub-side code) and the source file that emits it. Patterns are searched anywhere in
the text (Triton prefixes its own context, e.g. ``in ensemble 'text_embedding', ...``, and the
client prefixes the call, e.g. ``infer text_embedding: ...``), and are case-sensitive unless
they say otherwise.

:data:`Kind.UNREACHABLE` has no entry: no server answered, so there is no Triton text. It comes
from the exception type (:class:`tritonrepo_client.errors.ServerUnreachable`, whose ``kind`` is
``"unreachable"``) through :func:`kinds_of`; the socket and gRPC-core texts that identify it
stay with the exception classification (:func:`tritonrepo_client.errors.classify`).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass


class Kind(enum.Enum):
    """What a Triton error says happened.

    Members:
        UNREACHABLE: no server answered (set by the exception type only: :func:`kinds_of`).
        NOT_READY: a model version is known but not READY (loading, unloading, failed).
        NOT_FOUND: a model or a version of it is not loaded / not known.
        RESTRICTED: the API needs the model-repository key header (missing or wrong).
        QUEUE_FULL: the scheduler's queue is at ``max_queue_size``; refused at once.
        QUEUE_TIMEOUT: the request waited in the queue past its queue-policy timeout.
        DEAD_STUB: a Python-backend stub process died (SIGKILL, OOM killer).
        STUB_ERROR: any error that mentions a stub (case-insensitive ``stub``); every
            DEAD_STUB text is one too.
        ITEM_ERROR: this project's per-item refusal ``<TENSOR>[<index>] ...`` of one item of a
            batch (a text, an image).
        UNLOADED: the repository index's reason for a version that was unloaded on request
            (the whole reason, not a failure).
    """

    UNREACHABLE = "unreachable"
    NOT_READY = "not_ready"
    NOT_FOUND = "not_found"
    RESTRICTED = "restricted"
    QUEUE_FULL = "queue_full"
    QUEUE_TIMEOUT = "queue_timeout"
    DEAD_STUB = "dead_stub"
    STUB_ERROR = "stub_error"
    ITEM_ERROR = "item_error"
    UNLOADED = "unloaded"


@dataclass(frozen=True)
class Message:
    """One text Triton (or this project's stub-side code) emits, and the kind it means.

    Attributes:
        kind: what it means.
        pattern: what is searched for in an error text (:func:`re.search`).
        example: one exact text as emitted, with example names filled in.
        emitted_by: the repository and source file that emits it (Triton 2.51.0 = ``r24.10``),
            or the module of this project.
    """

    kind: Kind
    pattern: re.Pattern[str]
    example: str
    emitted_by: str


# Instance names of a stub named in a DEAD_STUB text: "<model>_<group>_<index>".
_NAMED_DEAD_STUB = re.compile(r"Stub process '([^']+)' is not healthy")

CATALOGUE: tuple[Message, ...] = (
    Message(
        Kind.NOT_READY,
        re.compile(r"is not at ready state"),
        "'text_embedding_normalize' version 2 is not at ready state",
        "triton core src/model_repository_manager/model_lifecycle.cc (ModelLifeCycle::GetModel)",
    ),
    Message(
        Kind.NOT_FOUND,
        re.compile(r"is not found"),
        "'text_embedding_normalize' version 3 is not found",
        "triton core src/model_repository_manager/model_lifecycle.cc (ModelLifeCycle::GetModel; "
        "also \"Request for unknown model: '<m>' is not found\" from "
        "src/model_repository_manager/model_repository_manager.cc)",
    ),
    Message(
        Kind.RESTRICTED,
        re.compile(r"This API is restricted"),
        "This API is restricted, expecting header 'x-model-repository-key'",
        "triton server src/http_server.cc (HTTPAPIServer::RespondIfRestricted)",
    ),
    Message(
        Kind.RESTRICTED,
        re.compile(r"This protocol is restricted"),
        "This protocol is restricted, expecting header "
        "'triton-grpc-protocol-x-model-repository-key'",
        "triton server src/grpc/grpc_server.cc (CommonCallData::Execute), "
        "src/grpc/infer_handler.cc (ModelInferHandler::Process)",
    ),
    Message(
        Kind.QUEUE_FULL,
        re.compile(r"Exceeds maximum queue size"),
        "[request id: <id_unknown>] Exceeds maximum queue size",
        "triton core src/scheduler_utils.cc (PriorityQueue::PolicyQueue::Enqueue)",
    ),
    Message(
        Kind.QUEUE_TIMEOUT,
        re.compile(r"Request timeout expired"),
        "Request timeout expired",
        "triton core src/dynamic_batch_scheduler.cc (FinishRejectedCancelledRequests)",
    ),
    Message(
        Kind.DEAD_STUB,
        _NAMED_DEAD_STUB,
        "Stub process 'text_embedding_tokenize_0_0' is not healthy.",
        "python_backend src/stub_launcher.cc (StubLauncher::ReceiveMessageFromStub)",
    ),
    Message(
        Kind.DEAD_STUB,
        re.compile(r"Stub process is not healthy"),
        "Stub process is not healthy.",
        "python_backend src/python_be.cc (ModelInstanceState::SendMessageToStub)",
    ),
    Message(
        Kind.STUB_ERROR,
        re.compile(r"stub", re.IGNORECASE),
        "Failed to share CUDA memory pool with stub process: CUDA driver API error",
        "python_backend src/python_be.cc (ModelInstanceState::ShareCUDAMemoryPool); any text "
        "with 'stub' in it",
    ),
    Message(
        Kind.ITEM_ERROR,
        re.compile(r"\b[A-Z][A-Z0-9_]*\[\d+\]"),
        "TEXT[3] is a int, not a string",
        "tritonrepo.text.tokenization (InvalidRequest, per item; also tritonrepo.image.preprocess "
        "'IMAGE[<i>] ...')",
    ),
    Message(
        Kind.UNLOADED,
        re.compile(r"\Aunloaded\Z"),
        "unloaded",
        "triton core src/model_repository_manager/model_lifecycle.cc (ModelLifeCycle::CreateModel, "
        "the model's deleter once an unload ends)",
    ),
)


def kinds_in(text: str) -> frozenset[Kind]:
    """The kinds of every catalogue message found in ``text`` (empty when none is).

    Never :data:`Kind.UNREACHABLE` (no text carries it; see :func:`kinds_of`).
    """
    return frozenset(m.kind for m in CATALOGUE if m.pattern.search(text))


def kinds_of(exc: BaseException) -> frozenset[Kind]:
    """The kinds of an exception: :func:`kinds_in` of its text, plus :data:`Kind.UNREACHABLE`
    when it is a :class:`~tritonrepo_client.errors.ServerUnreachable` (read from its ``kind``
    attribute, ``"unreachable"``, so this module imports nothing)."""
    found = kinds_in(str(exc))
    if getattr(exc, "kind", None) == "unreachable":
        found |= {Kind.UNREACHABLE}
    return found


def dead_stub_instances(text: str) -> list[str]:
    """The stub instances (``<model>_<group>_<index>``, e.g. ``text_embedding_tokenize_0_0``)
    that ``text`` names as not healthy, in order of appearance, without repeats; [] when it
    names none (also for the unnamed ``Stub process is not healthy.``)."""
    return list(dict.fromkeys(_NAMED_DEAD_STUB.findall(text)))


def item_indices(text: str, tensor: str) -> list[int]:
    """The 0-based item indices that ``text`` names as ``<tensor>[<i>]`` (this project's
    per-item refusals, e.g. ``TEXT[3] is a int, not a string``), in order of appearance,
    without repeats; [] when it names none."""
    found = re.findall(re.escape(tensor) + r"\[(\d+)\]", text)
    return list(dict.fromkeys(int(i) for i in found))


__all__ = [
    "CATALOGUE",
    "Kind",
    "Message",
    "dead_stub_instances",
    "item_indices",
    "kinds_in",
    "kinds_of",
]
