"""The client's exception types: every failure ends in one of them, and its type (and ``kind``)
says which of these happened — no server, a deadline passed, the server temporarily unavailable,
the request refused as invalid, or another server-side error."""

from __future__ import annotations

from tritonclient.utils import InferenceServerException

# gRPC reports connection failures as UNAVAILABLE with one of these texts; Triton also uses
# UNAVAILABLE for its own errors (e.g. an unknown model), so the status alone is not enough.
_UNREACHABLE_TEXTS = ("failed to connect", "connection refused", "socket closed", "dns resolution")
# Triton's status for "try again later": gRPC UNAVAILABLE, HTTP 503 (server's HttpCodeFromError).
_UNAVAILABLE_STATUSES = ("StatusCode.UNAVAILABLE", "503")
_DEADLINE_STATUSES = ("StatusCode.DEADLINE_EXCEEDED",)
_INVALID_STATUSES = ("StatusCode.INVALID_ARGUMENT", "400")


class ClientError(RuntimeError):
    """The server answered with an error; the message is Triton's, on one line.

    Attributes:
        kind: ``"server"`` here; the subclasses say ``"unreachable"``, ``"timeout"``,
            ``"unavailable"``, ``"invalid"`` or ``"version"``.
        attempts: how many times the call was tried (> 1 after retries).
    """

    kind = "server"

    def __init__(self, message: str, attempts: int = 1) -> None:
        super().__init__(message)
        self.attempts = attempts


class ServerUnreachable(ClientError):
    """No Triton server answers at the URL (connection refused, reset, DNS)."""

    kind = "unreachable"


class DeadlineExceeded(ClientError):
    """The call's deadline passed before the answer came (client-side; the request's Triton
    ``timeout`` parameter lets the server drop the work too)."""

    kind = "timeout"


class ServerUnavailable(ClientError):
    """Triton answered UNAVAILABLE (gRPC) / 503 (HTTP): e.g. a model not loaded yet or a server
    shutting down; worth retrying for idempotent calls."""

    kind = "unavailable"


class RequestRejected(ClientError):
    """Triton refused the request as invalid (gRPC INVALID_ARGUMENT / HTTP 400): wrong inputs,
    a limit exceeded; retrying cannot help."""

    kind = "invalid"


class VersionNotLoaded(ClientError):
    """A request named a model version that the server has not loaded."""

    kind = "version"


def _reason(exc: BaseException) -> str:
    """One line saying what went wrong in ``exc``."""
    if isinstance(exc, InferenceServerException):
        text = exc.message() or str(exc)
    else:
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return " ".join(str(text).split())


def classify(exc: BaseException) -> type[ClientError]:
    """The :class:`ClientError` subclass that describes ``exc`` (an exception raised by
    tritonclient, gevent, grpc or the socket layer)."""
    if type(exc).__name__ == "Timeout" or isinstance(exc, TimeoutError):
        return DeadlineExceeded  # gevent.Timeout (HTTP deadline) or socket timeout
    if isinstance(exc, (ConnectionError, OSError)):
        return ServerUnreachable
    if isinstance(exc, InferenceServerException):
        text = str(exc.message() or "").lower()
        status = str(exc.status() or "")
        if any(marker in text for marker in _UNREACHABLE_TEXTS):
            return ServerUnreachable
        if status in _DEADLINE_STATUSES or "deadline exceeded" in text:
            return DeadlineExceeded
        if status in _UNAVAILABLE_STATUSES:
            return ServerUnavailable
        if status in _INVALID_STATUSES:
            return RequestRejected
    return ClientError
