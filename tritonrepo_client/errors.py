"""The client's exception types: every failure ends in one of them, and its type (and ``kind``)
says which of these happened — no server, a deadline passed, the server temporarily unavailable,
the request refused as invalid, or another server-side error."""

from __future__ import annotations

from dataclasses import dataclass

from tritonclient.utils import InferenceServerException

from tritonrepo_client.triton_messages import Kind, kinds_in

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


class WrongProtocol(ClientError):
    """The URL's port speaks the other protocol: an HTTP client at Triton's gRPC port (HTTP/2)
    or a gRPC client at its HTTP/1.1 port. Retrying cannot help; the message names the fix."""

    kind = "protocol"


# What each client sees when the port speaks the other protocol. The HTTP clients read the
# gRPC server's first HTTP/2 frame as a status line (geventhttpclient's HTTPParseError
# "Expected HTTP/", aiohttp's "Bad status line ... Expected HTTP/"); gRPC core reports an
# HTTP/1.x answer as "Trying to connect an http1.x server" or an HTTP/2 parse failure, and
# Triton's HTTP server just closes the connection ("Socket closed", seen), which a dying
# server does too: then the port is asked for an HTTP/1.1 answer (:func:`answers_http1`).
_HTTP_AT_GRPC_TEXTS = ("expected http/",)
_GRPC_AT_HTTP_TEXTS = (
    "trying to connect an http1.x server",
    "failed parsing http/2",
    "expected settings frame",
)
_HTTP_AT_GRPC_FIX = (
    "this port answers in HTTP/2, i.e. it is Triton's gRPC port: point the client at the "
    'HTTP port (default 8000) or use --protocol grpc / protocol="grpc"'
)
_GRPC_AT_HTTP_FIX = (
    "this port answers in HTTP/1.1, i.e. it is Triton's HTTP port: point the client at the "
    'gRPC port (default 8001) or use --protocol http / protocol="http"'
)


def answers_http1(url: str, timeout_s: float = 1.0) -> bool:
    """Whether ``host:port`` answers an HTTP/1.1 ``GET /v2/health/live`` with an HTTP status
    line (a plain socket, no TLS; False on any failure)."""
    import socket

    host, _, port = url.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout_s) as sock:
            sock.settimeout(timeout_s)
            sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: " + host.encode() + b"\r\n\r\n")
            return sock.recv(5) == b"HTTP/"
    except (OSError, ValueError):
        return False


def wrong_protocol(exc: BaseException, protocol: str, url: str | None = None) -> str | None:
    """The fix when ``exc`` shows that the server's port speaks the other protocol than
    ``protocol`` (``"http"`` or ``"grpc"``), else None. With ``url``, a gRPC connection the
    server closed is checked by asking the port for HTTP/1.1 (:func:`answers_http1`)."""
    text = f"{type(exc).__name__} {exc} {_reason(exc)}".lower()
    if protocol == "http" and any(marker in text for marker in _HTTP_AT_GRPC_TEXTS):
        return _HTTP_AT_GRPC_FIX
    if protocol == "grpc" and any(marker in text for marker in _GRPC_AT_HTTP_TEXTS):
        return _GRPC_AT_HTTP_FIX
    if protocol == "grpc" and url and "socket closed" in text and answers_http1(url):
        return _GRPC_AT_HTTP_FIX
    return None


def wrong_protocol_message(what: str, url: str, protocol: str, fix: str, exc: BaseException) -> str:
    """One line for :class:`WrongProtocol`: the action, the URL, the ``fix``
    (:func:`wrong_protocol`) and the start of what the client saw."""
    seen = _reason(exc)
    seen = seen if len(seen) <= 120 else seen[:119] + "…"
    return f"{what}: {url} does not speak {protocol}: {fix} ({seen})"


def _reason(exc: BaseException) -> str:
    """One line saying what went wrong in ``exc``."""
    if isinstance(exc, InferenceServerException):
        text = exc.message() or str(exc)
    else:
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return " ".join(str(text).split())


def classify(exc: BaseException) -> type[ClientError]:
    """The :class:`ClientError` subclass that describes ``exc`` (an exception raised by
    tritonclient, gevent, grpc, aiohttp or the socket layer); :class:`WrongProtocol` is told
    apart by :func:`wrong_protocol`, which needs the client's protocol."""
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


# Triton's texts for a request naming a version it has not loaded: "... version 2 is not
# found" (never loaded) or "... is not at ready state" (loading, unloading, failed).
_VERSION_KINDS = frozenset({Kind.NOT_READY, Kind.NOT_FOUND})


@dataclass(frozen=True)
class CallSite:
    """What a call was, for its error message: the same for the thread and asyncio clients.

    Attributes:
        what: the action (e.g. ``"infer text_embedding"``).
        url: ``host:port`` called.
        protocol: ``"http"`` or ``"grpc"``.
        deadline_s: the call's deadline, seconds (named when it passes).
        probe_port: whether a gRPC connection the server closed may be checked by asking the
            port for HTTP/1.1 (:func:`answers_http1`; off for TLS).
        model: the model of an inference, "" otherwise.
        model_version: the version it named, "" for the model's policy.
    """

    what: str
    url: str
    protocol: str
    deadline_s: float
    probe_port: bool = True
    model: str = ""
    model_version: str = ""


def to_client_error(exc: BaseException, site: CallSite, attempts: int = 1) -> ClientError:
    """The :class:`ClientError` subclass instance, with a one-line message, for ``exc``: an
    exception raised by tritonclient (``InferenceServerException`` of HTTP or gRPC, sync or
    aio), gevent, grpc, aiohttp, asyncio or the socket layer during the call ``site``, on try
    number ``attempts``.

    Messages: :class:`WrongProtocol` names the fix; :class:`ServerUnreachable` the URL and
    protocol; :class:`DeadlineExceeded` the deadline in seconds; :class:`VersionNotLoaded` the
    model and version (:func:`version_not_loaded` adds the loaded versions); the others
    ``"<what> failed: <Triton's message>"``. ``" (after N tries)"`` follows the action when
    ``attempts`` > 1.
    """
    tries = f" (after {attempts} tries)" if attempts > 1 else ""
    fix = wrong_protocol(exc, site.protocol, site.url if site.probe_port else None)
    if fix:
        message = wrong_protocol_message(site.what, site.url, site.protocol, fix, exc)
        return WrongProtocol(message, attempts)
    kind = classify(exc)
    if kind is ServerUnreachable:
        return kind(
            f"cannot reach Triton at {site.url} over {site.protocol} ({site.what}){tries}: "
            f"{_reason(exc)}; is the server running (`make serve`) and the URL right?",
            attempts,
        )
    if kind is DeadlineExceeded:
        return kind(f"{site.what}: deadline of {site.deadline_s:g} s exceeded{tries}", attempts)
    if site.model_version and kinds_in(_reason(exc)) & _VERSION_KINDS:
        return version_not_loaded(site.model, site.model_version, None, attempts)
    return kind(f"{site.what} failed{tries}: {_reason(exc)}", attempts)


def version_not_loaded(
    model: str, version: str, loaded: list[str] | None, attempts: int = 1
) -> VersionNotLoaded:
    """:class:`VersionNotLoaded` for ``version`` of ``model``; ``loaded``: the versions the
    server has loaded (None: unknown, e.g. the model itself is not loaded)."""
    listed = "unknown (model not loaded)" if loaded is None else ", ".join(loaded) or "none"
    return VersionNotLoaded(
        f"version {version} of model '{model}' is not loaded (loaded versions: {listed})",
        attempts,
    )
