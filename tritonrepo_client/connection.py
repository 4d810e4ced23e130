"""One connection to a Triton server over HTTP or gRPC, safe to share between threads, with
deadlines, retries and errors explained in one line (:mod:`tritonrepo_client.errors`)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tritonrepo_client.core import (
    DEFAULT_URLS,
    CallAttempts,
    ConnectionCore,
    GrpcTls,
    InferCall,
    ModelClientCore,
    Protocol,
    build_request,
    grpc_tls_arguments,
    resolve_url,
)
from tritonrepo_client.errors import (
    CallSite,
    ClientError,
    DeadlineExceeded,
    RequestRejected,
    ServerUnavailable,
    ServerUnreachable,
    VersionNotLoaded,
    WrongProtocol,
    version_not_loaded,
)
from tritonrepo_client.retry import RetryPolicy
from tritonrepo_client.routing import RouteTable

T = TypeVar("T")


class TritonConnection(ConnectionCore):
    """A tritonclient HTTP or gRPC client behind one interface, safe to share across threads.

    tritonclient's HTTP client (geventhttpclient) belongs to the thread that made it: shared
    with a ``ThreadPoolExecutor`` its calls from other threads hung for good. So each thread
    that uses this connection gets an underlying client of its own (for gRPC too, one channel
    per thread), made on first use and closed by :meth:`close`. Requests, errors and retries
    are built and decided in :mod:`tritonrepo_client.core`, shared with
    :class:`tritonrepo_client.aio.AsyncTritonConnection`.

    Args:
        url: ``host:port`` (default 127.0.0.1:8000 for HTTP, 127.0.0.1:8001 for gRPC).
        protocol: ``"http"`` or ``"grpc"``.
        timeout_s: deadline of each call, seconds (connecting included), unless the call
            passes its own.
        tls: gRPC over TLS (HTTP TLS ends at the reverse proxy of the container path).
        retry: retries of idempotent calls on ``unreachable`` / ``unavailable``
            (:class:`tritonrepo_client.retry.RetryPolicy`; default 4 tries, 0.1 s doubling to
            2 s, full jitter). Session events are never retried.
        routes: gRPC only: the HTTP guard's canary routes
            (:class:`tritonrepo_client.routing.RouteTable`), followed by requests that name no
            version.

    Raises:
        ValueError: unknown protocol, or TLS asked for HTTP.
    """

    def __init__(
        self,
        url: str | None = None,
        protocol: Protocol = "http",
        timeout_s: float = 60.0,
        tls: GrpcTls | None = None,
        retry: RetryPolicy | None = None,
        routes: RouteTable | None = None,
    ) -> None:
        super().__init__(url, protocol, timeout_s, tls, retry, routes)
        self._local = threading.local()
        self._clients: list[tuple[threading.Thread, Any]] = []
        self._lock = threading.Lock()
        self._closed = False

    @property
    def client(self) -> Any:
        """This thread's tritonclient ``InferenceServerClient`` (made on first use).

        Raises:
            ClientError: the connection is closed.
        """
        client = getattr(self._local, "client", None)
        if client is None:
            if self._closed:
                raise ClientError(f"connection to {self.url} is closed")
            client = self._new_client()
            self._local.client = client
            with self._lock:
                # Clients of threads that have ended (a finished thread pool) are closed here,
                # so a long-lived connection used from short-lived threads holds no stale sockets.
                ended = [c for t, c in self._clients if not t.is_alive()]
                self._clients = [(t, c) for t, c in self._clients if t.is_alive()]
                self._clients.append((threading.current_thread(), client))
            for stale in ended:
                with contextlib.suppress(Exception):
                    stale.close()
        return client

    def _new_client(self) -> Any:
        if self.protocol == "http":
            return httpclient.InferenceServerClient(
                self.url, connection_timeout=self.timeout_s, network_timeout=self.timeout_s
            )
        return grpcclient.InferenceServerClient(self.url, **grpc_tls_arguments(self.tls))

    def call(
        self,
        what: str,
        fn: Callable[[], T],
        retry: RetryPolicy | None = None,
        timeout_s: float | None = None,
    ) -> T:
        """Run ``fn`` (which uses :attr:`client`), retrying per ``retry`` (default: no retry),
        and translate failures into one :class:`ClientError` subclass.

        Args:
            what: names the action in messages (e.g. "infer text_embedding").
            retry: the policy for this call; None = try once.
            timeout_s: the HTTP call's deadline, seconds (gevent timeout; gRPC calls take
                ``client_timeout`` instead); None = the client's network timeout.

        Raises:
            ServerUnreachable, DeadlineExceeded, ServerUnavailable, RequestRejected,
            WrongProtocol, ClientError: what happened (``kind``), after ``attempts`` tries
            (:func:`tritonrepo_client.errors.to_client_error`).
        """
        return self._call(self.site(what, timeout_s), fn, retry, timeout_s)

    def _call(
        self,
        site: CallSite,
        fn: Callable[[], T],
        retry: RetryPolicy | None,
        timeout_s: float | None,
    ) -> T:
        attempts = CallAttempts(site, retry)
        while True:
            try:
                return self._once(fn, timeout_s)
            except Exception as exc:
                time.sleep(attempts.delay_after(exc))

    def _once(self, fn: Callable[[], T], timeout_s: float | None) -> T:
        if self.protocol != "http" or timeout_s is None:
            return fn()
        import gevent

        try:
            with gevent.Timeout(timeout_s):
                return fn()
        except gevent.Timeout:  # a BaseException: would escape `except Exception`
            raise TimeoutError(f"no answer within {timeout_s:g} s") from None

    def model_config(self, model: str) -> dict[str, Any]:
        """The model's configuration as a dict (ModelConfig JSON field names); retried like
        inference (idempotent)."""
        args = self.config_arguments()
        answer = self.call(
            f"config of {model}", lambda: self.client.get_model_config(model, **args), self.retry
        )
        return self.config_of(answer)

    def server_live(self) -> bool:
        """``GET /v2/health/live`` (gRPC ServerLive)."""
        return bool(self.call("liveness", self.client.is_server_live))

    def server_ready(self) -> bool:
        """``GET /v2/health/ready`` (gRPC ServerReady)."""
        return bool(self.call("readiness", self.client.is_server_ready))

    def model_ready(self, model: str, version: str = "") -> bool:
        """Whether ``model`` (``version``, or its policy's versions) is READY."""
        return bool(
            self.call(f"readiness of {model}", lambda: self.client.is_model_ready(model, version))
        )

    def model_versions(self, model: str) -> list[str]:
        """Versions of ``model`` that are loaded, from its metadata (open, needs no key)."""
        meta = self.call(f"metadata of {model}", lambda: self.client.get_model_metadata(model))
        return self.versions_of(meta)

    def infer(
        self,
        model: str,
        inputs: dict[str, np.ndarray],
        outputs: Sequence[str],
        model_version: str = "",
        timeout_s: float | None = None,
        retry: bool = True,
        priority: int = 0,
        timeout_us: int | None = None,
        class_count: int = 0,
        **kwargs: Any,
    ) -> dict[str, np.ndarray]:
        """One inference; ``inputs`` are numpy arrays (object arrays of bytes for BYTES).

        Args:
            model_version: the version to run ("" = the model's version policy).
            timeout_s: this call's deadline, seconds (default: the connection's). It is both
                the client's deadline and Triton's request ``timeout`` (µs), so a model whose
                queue policy allows it drops the request once nobody waits for it.
            priority: priority level (1 realtime, 2 bulk; 0 = the model's default:
                :mod:`tritonrepo_client.scheduling`).
            timeout_us: Triton's queue timeout in µs, when it should differ from the deadline
                (a request still queued after it is rejected as UNAVAILABLE).
            retry: retry per the connection's policy; pass False for calls that are not
                idempotent (sequence events; done for you when ``sequence_id`` is given).
            class_count: > 0 asks Triton's classification extension for the top
                ``class_count`` of each output (BYTES ``"<score>:<index>:<label>"``).
            kwargs: tritonclient ``infer`` arguments (``sequence_id``, ``request_id``, ...).

        Returns ``{output name: array}``.

        Raises:
            VersionNotLoaded: ``model_version`` is not loaded (the message lists those that
                are); never retried.
            ServerUnreachable, DeadlineExceeded, ServerUnavailable, RequestRejected,
            ClientError: see :meth:`call`.
        """
        call = self.infer_call(
            model, inputs, outputs, model_version, timeout_s, retry, priority, timeout_us,
            class_count, kwargs,
        )  # fmt: skip
        try:
            result = self._send(call)
        except VersionNotLoaded:
            raise self._version_not_loaded(model, model_version) from None
        return self.answers(result, call.outputs)

    def _send(self, call: InferCall) -> Any:
        return self._call(
            call.site,
            lambda: self.client.infer(call.model, call.tensors, **call.kwargs),
            call.retry,
            call.site.deadline_s,
        )

    def _version_not_loaded(self, model: str, version: str) -> VersionNotLoaded:
        try:
            loaded: list[str] | None = self.model_versions(model)
        except ClientError:
            loaded = None
        return version_not_loaded(model, version, loaded)

    def close(self) -> None:
        """Close every thread's underlying client; later calls raise :class:`ClientError`."""
        with self._lock:
            clients, self._clients = [c for _, c in self._clients], []
            self._closed = True
        for client in clients:
            with contextlib.suppress(Exception):
                client.close()

    def __enter__(self) -> TritonConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ModelClient(ModelClientCore):
    """Base of the per-model clients: one connection to one model, usable as a context manager.

    Args:
        url: ``host:port`` of the server (defaults per protocol: 8000 HTTP, 8001 gRPC).
        protocol: ``"http"`` or ``"grpc"``.
        model: model name (default: the subclass's ``DEFAULT_MODEL``).
        timeout_s: deadline per call, seconds (methods take their own ``timeout_s`` too).
        tls: gRPC over TLS (:class:`GrpcTls`).
        retry: retries of idempotent calls (:class:`RetryPolicy`; never for session events).
        priority: priority level of its requests unless a call names one (1 realtime, 2 bulk;
            0 = the model's default: :mod:`tritonrepo_client.scheduling`).
        timeout_us: Triton's queue timeout of its requests in µs unless a call names one
            (None: the call's deadline).

    A client is safe to share across threads (:class:`TritonConnection`).
    """

    CONNECTION = TritonConnection
    connection: TritonConnection

    @property
    def max_batch_size(self) -> int:
        """The model's ``max_batch_size`` (read from the server once).

        Raises:
            ClientError: the config cannot be read.
        """
        if self._max_batch_size is None:
            config = self.connection.model_config(self.model)
            self._max_batch_size = self.connection.max_batch_size_of(config)
        return self._max_batch_size

    def close(self) -> None:
        """Close the connection."""
        self.connection.close()

    def __enter__(self: M) -> M:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


M = TypeVar("M", bound=ModelClient)


__all__ = [
    "DEFAULT_URLS",
    "ClientError",
    "DeadlineExceeded",
    "GrpcTls",
    "ModelClient",
    "RequestRejected",
    "RetryPolicy",
    "ServerUnavailable",
    "ServerUnreachable",
    "TritonConnection",
    "VersionNotLoaded",
    "WrongProtocol",
    "build_request",
    "grpc_tls_arguments",
    "resolve_url",
]
