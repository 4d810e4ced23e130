"""One connection to a Triton server over HTTP or gRPC, safe to share between threads, with
deadlines, retries and errors explained in one line (:mod:`tritonrepo_client.errors`)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import np_to_triton_dtype

from tritonrepo_client.errors import (
    ClientError,
    DeadlineExceeded,
    RequestRejected,
    ServerUnavailable,
    ServerUnreachable,
    VersionNotLoaded,
    WrongProtocol,
    _reason,
    classify,
    wrong_protocol,
    wrong_protocol_message,
)
from tritonrepo_client.retry import NO_RETRY, RetryPolicy
from tritonrepo_client.scheduling import scheduling_kwargs

Protocol = Literal["http", "grpc"]
DEFAULT_URLS: dict[str, str] = {"http": "127.0.0.1:8000", "grpc": "127.0.0.1:8001"}
T = TypeVar("T")


@dataclass(frozen=True)
class GrpcTls:
    """TLS for the gRPC endpoint (a server started with ``--grpc-tls-cert``): PEM files.

    Attributes:
        root_cert: the CA that signed the server's certificate.
        client_cert: this client's certificate, for a server that requires mutual TLS.
        client_key: its private key.
    """

    root_cert: str | Path
    client_cert: str | Path | None = None
    client_key: str | Path | None = None


def resolve_url(url: str | None, protocol: str, tls: GrpcTls | None) -> str:
    """``url`` or the protocol's default ``host:port``.

    Raises:
        ValueError: unknown protocol, TLS asked for HTTP, or a URL with a scheme.
    """
    if protocol not in DEFAULT_URLS:
        raise ValueError(f"protocol must be 'http' or 'grpc', got {protocol!r}")
    if tls is not None and protocol != "grpc":
        raise ValueError("TLS is for the gRPC endpoint; HTTP TLS ends at a reverse proxy")
    if url and "://" in url:
        raise ValueError(f"url is host:port without a scheme, got {url!r}")
    return url or DEFAULT_URLS[protocol]


def grpc_tls_arguments(tls: GrpcTls | None) -> dict[str, Any]:
    """Keyword arguments of tritonclient's gRPC ``InferenceServerClient`` (sync and aio) for
    ``tls``; {} without TLS."""
    if tls is None:
        return {}
    return {
        "ssl": True,
        "root_certificates": str(tls.root_cert),
        "private_key": str(tls.client_key) if tls.client_key else None,
        "certificate_chain": str(tls.client_cert) if tls.client_cert else None,
    }


def build_request(
    module: Any, inputs: dict[str, np.ndarray], outputs: Sequence[str]
) -> tuple[list[Any], list[Any]]:
    """tritonclient ``InferInput`` / ``InferRequestedOutput`` lists for ``module``
    (``tritonclient.http`` or ``tritonclient.grpc``) from numpy arrays (object arrays of bytes
    for BYTES)."""
    tensors = []
    for name, value in inputs.items():
        dtype = "BYTES" if value.dtype == object else np_to_triton_dtype(value.dtype)
        tensor = module.InferInput(name, list(value.shape), dtype)
        tensor.set_data_from_numpy(value)
        tensors.append(tensor)
    return tensors, [module.InferRequestedOutput(name) for name in outputs]


class TritonConnection:
    """A tritonclient HTTP or gRPC client behind one interface, safe to share across threads.

    tritonclient's HTTP client (geventhttpclient) belongs to the thread that made it: shared
    with a ``ThreadPoolExecutor`` its calls from other threads hung for good (issue 13). So each
    thread that uses this connection gets an underlying client of its own (for gRPC too, one
    channel per thread), made on first use and closed by :meth:`close`.

    Args:
        url: ``host:port`` (default 127.0.0.1:8000 for HTTP, 127.0.0.1:8001 for gRPC).
        protocol: ``"http"`` or ``"grpc"``.
        timeout_s: deadline of each call, seconds (connecting included), unless the call
            passes its own.
        tls: gRPC over TLS (HTTP TLS ends at the reverse proxy of the container path).
        retry: retries of idempotent calls on ``unreachable`` / ``unavailable``
            (:class:`tritonrepo_client.retry.RetryPolicy`; default 4 tries, 0.1 s doubling to
            2 s, full jitter). Session events are never retried.

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
    ) -> None:
        self.url = resolve_url(url, protocol, tls)
        self.protocol = protocol
        self.timeout_s = timeout_s
        self.tls = tls
        self.retry = retry or RetryPolicy()
        self.module: Any = httpclient if protocol == "http" else grpcclient
        self._local = threading.local()
        self._clients: list[tuple[threading.Thread, Any]] = []
        self._lock = threading.Lock()
        self._closed = False

    @property
    def client(self) -> Any:
        """This thread's tritonclient ``InferenceServerClient`` (made on first use)."""
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
            ClientError: what happened (``kind``), after ``attempts`` tries.
        """
        policy = retry or NO_RETRY
        delays = policy.delays()
        attempt = 0
        while True:
            attempt += 1
            try:
                return self._once(fn, timeout_s)
            except Exception as exc:
                fix = wrong_protocol(exc, self.protocol, self.url if self.tls is None else None)
                kind = WrongProtocol if fix else classify(exc)
                delay = next(delays, None) if kind.kind in policy.retry_on else None
                if fix:
                    message = wrong_protocol_message(what, self.url, self.protocol, fix, exc)
                    raise WrongProtocol(message, attempt) from None
                if delay is None:
                    raise self._error(kind, what, exc, attempt) from None
                time.sleep(delay)

    def _once(self, fn: Callable[[], T], timeout_s: float | None) -> T:
        if self.protocol != "http" or timeout_s is None:
            return fn()
        import gevent

        try:
            with gevent.Timeout(timeout_s):
                return fn()
        except gevent.Timeout:  # a BaseException: would escape `except Exception`
            raise TimeoutError(f"no answer within {timeout_s:g} s") from None

    def _error(
        self, kind: type[ClientError], what: str, exc: BaseException, attempts: int
    ) -> ClientError:
        tries = f" (after {attempts} tries)" if attempts > 1 else ""
        if kind is ServerUnreachable:
            return kind(
                f"cannot reach Triton at {self.url} over {self.protocol} ({what}){tries}: "
                f"{_reason(exc)}; is the server running (`make serve`) and the URL right?",
                attempts,
            )
        if kind is DeadlineExceeded:
            return kind(f"{what}: deadline exceeded{tries}: {_reason(exc)}", attempts)
        return kind(f"{what} failed{tries}: {_reason(exc)}", attempts)

    def model_config(self, model: str) -> dict[str, Any]:
        """The model's configuration as a dict (ModelConfig JSON field names); retried like
        inference (idempotent)."""
        if self.protocol == "http":
            return self.call(
                f"config of {model}", lambda: self.client.get_model_config(model), self.retry
            )
        result = self.call(
            f"config of {model}",
            lambda: self.client.get_model_config(model, as_json=True),
            self.retry,
        )
        return result["config"]

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
        versions = meta["versions"] if isinstance(meta, dict) else list(meta.versions)
        return [str(v) for v in versions]

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
        **kwargs: Any,
    ) -> dict[str, np.ndarray]:
        """One inference; ``inputs`` are numpy arrays (object arrays of bytes for BYTES).

        Args:
            timeout_s: this call's deadline, seconds (default: the connection's). It is both
                the client's deadline and Triton's request ``timeout`` (µs), so a model whose
                queue policy allows it drops the request once nobody waits for it.
            priority: priority level (1 realtime, 2 bulk; 0 = the model's default:
                :mod:`tritonrepo_client.scheduling`).
            timeout_us: Triton's queue timeout in µs, when it should differ from the deadline
                (a request still queued after it is rejected as UNAVAILABLE).
            retry: retry per the connection's policy; pass False for calls that are not
                idempotent (sequence events; done for you when ``sequence_id`` is given).
            kwargs: tritonclient ``infer`` arguments (``sequence_id``, ``request_id``, ...).

        Returns ``{output name: array}``.

        Raises:
            ServerUnreachable, DeadlineExceeded, ServerUnavailable, RequestRejected,
            VersionNotLoaded, ClientError: see :meth:`call`.
        """
        deadline = self.timeout_s if timeout_s is None else timeout_s
        tensors, requested = build_request(self.module, inputs, outputs)
        for key, value in scheduling_kwargs(priority, timeout_us, deadline).items():
            kwargs.setdefault(key, value)
        if self.protocol == "grpc":
            kwargs.setdefault("client_timeout", deadline)
        idempotent = retry and not kwargs.get("sequence_id")
        what = f"infer {model}" + (f" version {model_version}" if model_version else "")
        try:
            result = self.call(
                what,
                lambda: self.client.infer(
                    model, tensors, model_version=model_version, outputs=requested, **kwargs
                ),
                retry=self.retry if idempotent else None,
                timeout_s=deadline,
            )
        except (ServerUnreachable, DeadlineExceeded):
            raise
        except ClientError as exc:
            text = str(exc)
            if model_version and ("is not at ready state" in text or "is not found" in text):
                raise self._version_not_loaded(model, model_version) from None
            raise
        return {name: result.as_numpy(name) for name in outputs}

    def _version_not_loaded(self, model: str, version: str) -> VersionNotLoaded:
        try:
            loaded = ", ".join(self.model_versions(model)) or "none"
        except ClientError:
            loaded = "unknown (model not loaded)"
        return VersionNotLoaded(
            f"version {version} of model '{model}' is not loaded (loaded versions: {loaded})"
        )

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


class ModelClient:
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

    DEFAULT_MODEL = ""

    def __init__(
        self,
        url: str | None = None,
        protocol: Protocol = "http",
        model: str | None = None,
        timeout_s: float = 60.0,
        tls: GrpcTls | None = None,
        retry: RetryPolicy | None = None,
        priority: int = 0,
        timeout_us: int | None = None,
    ) -> None:
        scheduling_kwargs(priority, timeout_us, timeout_s)  # ValueError now, not at a call
        self.connection = TritonConnection(url, protocol, timeout_s, tls, retry)
        self.model = model or self.DEFAULT_MODEL
        self.priority = priority
        self.timeout_us = timeout_us

    _max_batch_size: int | None = None

    @property
    def max_batch_size(self) -> int:
        """The model's ``max_batch_size`` (read from the server once).

        Raises:
            ClientError: the config cannot be read.
        """
        if self._max_batch_size is None:
            self._max_batch_size = int(self.connection.model_config(self.model)["max_batch_size"])
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
]
