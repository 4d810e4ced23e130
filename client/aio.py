"""asyncio clients: the same models and methods as the thread-based clients, on
``tritonclient.http.aio`` (aiohttp) and ``tritonclient.grpc.aio``.

Example::

    async with AsyncEmbeddingClient("127.0.0.1:8001", "grpc") as client:
        vectors = await asyncio.gather(*(client.embed([t]) for t in texts))

Errors, deadlines and retries behave as in :class:`tritonrepo_client.TritonConnection`:
every failure is one :class:`tritonrepo_client.errors.ClientError` subclass.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpc_aio
import tritonclient.http as httpclient
import tritonclient.http.aio as http_aio

from tritonrepo_client.connection import (
    GrpcTls,
    Protocol,
    build_request,
    grpc_tls_arguments,
    resolve_url,
)
from tritonrepo_client.embedding import encode_texts
from tritonrepo_client.errors import (
    ClientError,
    DeadlineExceeded,
    ServerUnreachable,
    WrongProtocol,
    _reason,
    classify,
    wrong_protocol,
    wrong_protocol_message,
)
from tritonrepo_client.ranking import OUTPUTS, Ranking, SessionEvents, _ids
from tritonrepo_client.retry import NO_RETRY, RetryPolicy
from tritonrepo_client.scheduling import scheduling_kwargs
from tritonrepo_client.validation import check_correlation_id

A = TypeVar("A", bound="AsyncModelClient")


class AsyncTritonConnection:
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
    ) -> None:
        self.url = resolve_url(url, protocol, tls)
        self.protocol = protocol
        self.timeout_s = timeout_s
        self.retry = retry or RetryPolicy()
        self.module: Any = httpclient if protocol == "http" else grpcclient
        self._tls = tls
        self._client: Any = None

    @property
    def client(self) -> Any:
        """The tritonclient aio client (made on first use, inside the running loop)."""
        if self._client is None:
            if self.protocol == "http":
                self._client = http_aio.InferenceServerClient(self.url, conn_timeout=self.timeout_s)
            else:
                self._client = grpc_aio.InferenceServerClient(
                    self.url, **grpc_tls_arguments(self._tls)
                )
        return self._client

    async def call(
        self,
        what: str,
        make: Any,
        retry: RetryPolicy | None = None,
        timeout_s: float | None = None,
    ) -> Any:
        """Await ``make()`` (a new coroutine per try) with a deadline of ``timeout_s`` seconds,
        retrying per ``retry`` (default: once), failures as one ClientError subclass.

        Raises:
            ServerUnreachable, DeadlineExceeded, ServerUnavailable, RequestRejected,
            ClientError: what happened, after ``attempts`` tries.
        """
        policy = retry or NO_RETRY
        delays = policy.delays()
        deadline = self.timeout_s if timeout_s is None else timeout_s
        for attempt in itertools.count(1):
            try:
                return await asyncio.wait_for(make(), deadline)
            except Exception as exc:
                fix = wrong_protocol(exc, self.protocol, self.url if self._tls is None else None)
                kind = WrongProtocol if fix else classify(exc)
                delay = next(delays, None) if kind.kind in policy.retry_on else None
                if delay is None:
                    tries = f" (after {attempt} tries)" if attempt > 1 else ""
                    if fix:
                        message = wrong_protocol_message(what, self.url, self.protocol, fix, exc)
                        raise WrongProtocol(message, attempt) from None
                    if kind is ServerUnreachable:
                        message = f"cannot reach Triton at {self.url} over {self.protocol}"
                        raise kind(f"{message} ({what}){tries}: {_reason(exc)}", attempt) from None
                    if kind is DeadlineExceeded:
                        message = f"{what}: deadline of {deadline:g} s exceeded{tries}"
                        raise kind(message, attempt) from None
                    raise kind(f"{what} failed{tries}: {_reason(exc)}", attempt) from None
                await asyncio.sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover

    async def infer(
        self,
        model: str,
        inputs: dict[str, np.ndarray],
        outputs: Sequence[str],
        timeout_s: float | None = None,
        retry: bool = True,
        priority: int = 0,
        timeout_us: int | None = None,
        **kwargs: Any,
    ) -> dict[str, np.ndarray]:
        """One inference (as :meth:`tritonrepo_client.TritonConnection.infer`, ``priority``
        and ``timeout_us`` included); sequence events (``sequence_id`` given) are never
        retried.

        Returns ``{output name: array}``.
        """
        deadline = self.timeout_s if timeout_s is None else timeout_s
        tensors, requested = build_request(self.module, inputs, outputs)
        for key, value in scheduling_kwargs(priority, timeout_us, deadline).items():
            kwargs.setdefault(key, value)
        if self.protocol == "grpc":
            kwargs.setdefault("client_timeout", deadline)
        idempotent = retry and not kwargs.get("sequence_id")
        result = await self.call(
            f"infer {model}",
            lambda: self.client.infer(model, tensors, outputs=requested, **kwargs),
            retry=self.retry if idempotent else None,
            timeout_s=deadline,
        )
        return {name: result.as_numpy(name) for name in outputs}

    async def model_config(self, model: str) -> dict[str, Any]:
        """The model's configuration (ModelConfig JSON field names)."""
        if self.protocol == "http":
            return await self.call(
                f"config of {model}", lambda: self.client.get_model_config(model), self.retry
            )
        result = await self.call(
            f"config of {model}",
            lambda: self.client.get_model_config(model, as_json=True),
            self.retry,
        )
        return result["config"]

    async def close(self) -> None:
        """Close the underlying client."""
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()


class AsyncModelClient:
    """Base of the asyncio model clients (arguments as
    :class:`tritonrepo_client.connection.ModelClient`); ``async with`` closes it."""

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
        self.connection = AsyncTritonConnection(url, protocol, timeout_s, tls, retry)
        self.model = model or self.DEFAULT_MODEL
        self.priority = priority
        self.timeout_us = timeout_us

    async def close(self) -> None:
        """Close the connection."""
        await self.connection.close()

    async def __aenter__(self: A) -> A:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncEmbeddingClient(AsyncModelClient):
    """:class:`tritonrepo_client.EmbeddingClient` for asyncio."""

    DEFAULT_MODEL = "text_embedding"
    _max_batch_size: int | None = None

    async def embed(
        self,
        texts: Sequence[str | bytes],
        timeout_s: float | None = None,
        priority: int | None = None,
        timeout_us: int | None = None,
    ) -> np.ndarray:
        """Embed ``texts``: FP32 ``[len(texts), 384]``, rows L2-normalised; more texts than
        the ensemble's ``max_batch_size`` go as concurrent requests. ``priority`` (default:
        the client's) and ``timeout_us``: as :meth:`tritonrepo_client.EmbeddingClient.embed`.

        Raises:
            ValueError: ``texts`` is empty, one ``str``/``bytes`` instead of a list, or holds
                an item that is not text (:func:`tritonrepo_client.embedding.encode_texts`).
            ClientError: see :meth:`AsyncTritonConnection.call`.
        """
        encoded = encode_texts(texts)
        if self._max_batch_size is None:
            config = await self.connection.model_config(self.model)
            self._max_batch_size = int(config["max_batch_size"])
        chunk = self._max_batch_size
        parts = await asyncio.gather(
            *(
                self.connection.infer(
                    self.model,
                    {"TEXT": np.array(encoded[i : i + chunk], dtype=object).reshape(-1, 1)},
                    ["EMBEDDING"],
                    timeout_s=timeout_s,
                    priority=self.priority if priority is None else priority,
                    timeout_us=self.timeout_us if timeout_us is None else timeout_us,
                )
                for i in range(0, len(encoded), chunk)
            )
        )
        return np.concatenate([p["EMBEDDING"] for p in parts], axis=0)


class AsyncRankingClient(AsyncModelClient):
    """:class:`tritonrepo_client.RankingClient` for asyncio."""

    DEFAULT_MODEL = "ctr_ranking"

    async def rank(
        self,
        history: Sequence[int] | np.ndarray,
        candidates: Sequence[int] | np.ndarray,
        top_k: int | None = None,
        timeout_s: float | None = None,
        priority: int | None = None,
        timeout_us: int | None = None,
    ) -> Ranking:
        """Rank ``candidates`` for a user with ``history`` (as the thread-based client,
        ``priority`` and ``timeout_us`` included).

        Raises:
            ValueError: ids are not integers.
            ClientError: see :meth:`AsyncTritonConnection.call`.
        """
        inputs = {"HISTORY": _ids(history, "history"), "CANDIDATES": _ids(candidates, "candidates")}
        if top_k is not None:
            inputs["TOP_K"] = np.array([top_k], dtype=np.int32)
        out = await self.connection.infer(
            self.model,
            inputs,
            ["ITEM_IDS", "SCORES"],
            timeout_s=timeout_s,
            priority=self.priority if priority is None else priority,
            timeout_us=self.timeout_us if timeout_us is None else timeout_us,
        )
        return Ranking(out["ITEM_IDS"], out["SCORES"])


class AsyncSession(SessionEvents):
    """One session on ``ctr_session`` for asyncio; made by :meth:`AsyncSessionClient.session`.

    :meth:`send` takes the event's place in the session when it is CALLED, not when it is
    awaited: ``await asyncio.gather(s.send(1, c), s.send(2, c), s.send(3, c, end=True))``
    sends 1, 2, 3 in that order, each after the previous answer (one event of a correlation
    ID in flight at a time). Events are never retried.
    """

    def __init__(self, connection: AsyncTritonConnection, model: str, correlation_id: int | str):
        self.connection = connection
        self.model = model
        self.correlation_id = correlation_id
        self.started = False
        self.ended = False
        self._previous: asyncio.Future | None = None

    def send(
        self,
        item_id: int,
        candidates: Sequence[int] | np.ndarray,
        end: bool = False,
        timeout_s: float | None = None,
    ) -> Awaitable[Ranking]:
        """Queue the event ``item_id`` and return an awaitable of its :class:`Ranking` (all
        candidates, descending). Call it from the event loop's thread.

        Raises (when awaited):
            RuntimeError: the session had ended.
            ClientError: the server rejected the event; later events are still sent.
        """
        previous = self._previous
        done: asyncio.Future = asyncio.get_running_loop().create_future()
        self._previous = done
        ids = _ids(candidates, "candidates")

        async def run() -> Ranking:
            try:
                if previous is not None:
                    await asyncio.shield(previous)
                return await self._send(item_id, ids, end, timeout_s)
            finally:
                done.set_result(None)

        return asyncio.ensure_future(run())

    async def _send(
        self, item_id: int, candidates: np.ndarray, end: bool, timeout_s: float | None
    ) -> Ranking:
        inputs, options = self._event(item_id, candidates, end, timeout_s)
        out = await self.connection.infer(self.model, inputs, OUTPUTS, **options)
        return self._answered(out, end)


class AsyncSessionClient(AsyncModelClient):
    """:class:`tritonrepo_client.SessionClient` for asyncio."""

    DEFAULT_MODEL = "ctr_session"

    def session(self, correlation_id: int | str) -> AsyncSession:
        """A new session (correlation ID rules of
        :meth:`tritonrepo_client.SessionClient.session`).

        Raises:
            InvalidCorrelationId: (a ValueError) the ID cannot be sent; nothing is sent.
        """
        checked = check_correlation_id(correlation_id, protocol=self.connection.protocol)
        return AsyncSession(self.connection, self.model, checked)


__all__ = [
    "AsyncEmbeddingClient",
    "AsyncRankingClient",
    "AsyncSession",
    "AsyncSessionClient",
    "AsyncTritonConnection",
    "ClientError",
]
