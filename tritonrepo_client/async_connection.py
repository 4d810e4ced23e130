"""One asyncio connection to a Triton server over HTTP (``tritonclient.http.aio``, aiohttp) or
gRPC (``tritonclient.grpc.aio``): the methods of :class:`tritonrepo_client.TritonConnection`,
awaited. Requests, errors and retries come from :mod:`tritonrepo_client.core`, so both answer
and fail alike."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import numpy as np
import tritonclient.grpc.aio as grpc_aio
import tritonclient.http.aio as http_aio

from tritonrepo_client.core import (
    CallAttempts,
    ConnectionCore,
    GrpcTls,
    InferCall,
    ModelClientCore,
    Protocol,
    grpc_tls_arguments,
)
from tritonrepo_client.errors import CallSite, ClientError, VersionNotLoaded, version_not_loaded
from tritonrepo_client.retry import RetryPolicy
from tritonrepo_client.routing import RouteTable

T = TypeVar("T")
A = TypeVar("A", bound="AsyncModelClient")


class AsyncTritonConnection(ConnectionCore):
    """An asyncio tritonclient HTTP or gRPC client (arguments as
    :class:`tritonrepo_client.TritonConnection`). Use it from one event loop.

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
        self._client: Any = None
        self._closed = False

    @property
    def client(self) -> Any:
        """The tritonclient aio client (made on first use, inside the running loop).

        Raises:
            ClientError: the connection is closed.
        """
        if self._client is None:
            if self._closed:
                raise ClientError(f"connection to {self.url} is closed")
            if self.protocol == "http":
                self._client = http_aio.InferenceServerClient(self.url, conn_timeout=self.timeout_s)
            else:
                self._client = grpc_aio.InferenceServerClient(
                    self.url, **grpc_tls_arguments(self.tls)
                )
        return self._client

    async def call(
        self,
        what: str,
        fn: Callable[[], Awaitable[T]],
        retry: RetryPolicy | None = None,
        timeout_s: float | None = None,
    ) -> T:
        """Await ``fn()`` (a new awaitable per try) with a deadline of ``timeout_s`` seconds
        (None: the connection's), retrying per ``retry`` (default: once), failures as one
        :class:`ClientError` subclass (as :meth:`tritonrepo_client.TritonConnection.call`).

        Raises:
            ServerUnreachable, DeadlineExceeded, ServerUnavailable, RequestRejected,
            WrongProtocol, ClientError: what happened, after ``attempts`` tries.
        """
        return await self._call(self.site(what, timeout_s), fn, retry)

    async def _call(
        self, site: CallSite, fn: Callable[[], Awaitable[T]], retry: RetryPolicy | None
    ) -> T:
        attempts = CallAttempts(site, retry)
        while True:
            try:
                return await asyncio.wait_for(fn(), site.deadline_s)
            except Exception as exc:
                await asyncio.sleep(attempts.delay_after(exc))

    async def model_config(self, model: str) -> dict[str, Any]:
        """The model's configuration (ModelConfig JSON field names); retried (idempotent)."""
        args = self.config_arguments()
        answer = await self.call(
            f"config of {model}", lambda: self.client.get_model_config(model, **args), self.retry
        )
        return self.config_of(answer)

    async def server_live(self) -> bool:
        """``GET /v2/health/live`` (gRPC ServerLive)."""
        return bool(await self.call("liveness", self.client.is_server_live))

    async def server_ready(self) -> bool:
        """``GET /v2/health/ready`` (gRPC ServerReady)."""
        return bool(await self.call("readiness", self.client.is_server_ready))

    async def model_ready(self, model: str, version: str = "") -> bool:
        """Whether ``model`` (``version``, or its policy's versions) is READY."""
        return bool(
            await self.call(
                f"readiness of {model}", lambda: self.client.is_model_ready(model, version)
            )
        )

    async def model_versions(self, model: str) -> list[str]:
        """Versions of ``model`` that are loaded, from its metadata (open, needs no key)."""
        meta = await self.call(
            f"metadata of {model}", lambda: self.client.get_model_metadata(model)
        )
        return self.versions_of(meta)

    async def infer(
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
        """One inference (arguments, answer and errors as
        :meth:`tritonrepo_client.TritonConnection.infer`); sequence events (``sequence_id``
        given) are never retried.

        Returns ``{output name: array}``.

        Raises:
            VersionNotLoaded, ServerUnreachable, DeadlineExceeded, ServerUnavailable,
            RequestRejected, ClientError: see :meth:`call`.
        """
        call = self.infer_call(
            model, inputs, outputs, model_version, timeout_s, retry, priority, timeout_us,
            class_count, kwargs,
        )  # fmt: skip
        try:
            result = await self._send(call)
        except VersionNotLoaded:
            raise await self._version_not_loaded(model, model_version) from None
        return self.answers(result, call.outputs)

    async def _send(self, call: InferCall) -> Any:
        return await self._call(
            call.site,
            lambda: self.client.infer(call.model, call.tensors, **call.kwargs),
            call.retry,
        )

    async def _version_not_loaded(self, model: str, version: str) -> VersionNotLoaded:
        try:
            loaded: list[str] | None = await self.model_versions(model)
        except ClientError:
            loaded = None
        return version_not_loaded(model, version, loaded)

    async def close(self) -> None:
        """Close the underlying client; later calls raise :class:`ClientError`."""
        self._closed = True
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()

    async def __aenter__(self) -> AsyncTritonConnection:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncModelClient(ModelClientCore):
    """Base of the asyncio model clients (arguments as
    :class:`tritonrepo_client.connection.ModelClient`); ``async with`` closes it."""

    CONNECTION = AsyncTritonConnection
    connection: AsyncTritonConnection

    async def max_batch_size(self) -> int:
        """The model's ``max_batch_size`` (read from the server once; the thread-based
        clients' property of the same name).

        Raises:
            ClientError: the config cannot be read.
        """
        if self._max_batch_size is None:
            config = await self.connection.model_config(self.model)
            self._max_batch_size = self.connection.max_batch_size_of(config)
        return self._max_batch_size

    async def close(self) -> None:
        """Close the connection."""
        await self.connection.close()

    async def __aenter__(self: A) -> A:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


__all__ = ["AsyncModelClient", "AsyncTritonConnection"]
