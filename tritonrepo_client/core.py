"""What the thread-based and the asyncio clients share: settings, request building, error
conversion and retry decisions. Only the I/O differs between them (:mod:`.connection` calls
tritonclient's blocking clients, :mod:`.async_connection` its ``aio`` clients); everything
here does none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import np_to_triton_dtype

from tritonrepo_client.errors import CallSite, ClientError, to_client_error
from tritonrepo_client.retry import NO_RETRY, RetryPolicy, Schedule
from tritonrepo_client.routing import RouteTable
from tritonrepo_client.scheduling import scheduling_kwargs

Protocol = Literal["http", "grpc"]
DEFAULT_URLS: dict[str, str] = {"http": "127.0.0.1:8000", "grpc": "127.0.0.1:8001"}


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
    module: Any,
    inputs: dict[str, np.ndarray],
    outputs: Sequence[str],
    class_count: int = 0,
) -> tuple[list[Any], list[Any]]:
    """tritonclient ``InferInput`` / ``InferRequestedOutput`` lists for ``module``
    (``tritonclient.http`` or ``tritonclient.grpc``; their aio clients take the same objects)
    from numpy arrays (object arrays of bytes for BYTES). ``class_count`` > 0 asks Triton's
    classification extension for each output's top ``class_count`` as BYTES
    ``"<score>:<index>[:<label>]"``."""
    tensors = []
    for name, value in inputs.items():
        dtype = "BYTES" if value.dtype == object else np_to_triton_dtype(value.dtype)
        tensor = module.InferInput(name, list(value.shape), dtype)
        tensor.set_data_from_numpy(value)
        tensors.append(tensor)
    extra = {"class_count": class_count} if class_count else {}
    return tensors, [module.InferRequestedOutput(name, **extra) for name in outputs]


class CallAttempts:
    """The tries of one call: turns each failure into its :class:`ClientError`
    (:func:`tritonrepo_client.errors.to_client_error`) and decides, per the call's
    :class:`RetryPolicy`, whether another try follows. The call loops are then::

        while True:
            try:
                return call()
            except Exception as exc:
                time.sleep(attempts.delay_after(exc))   # or: await asyncio.sleep(...)
    """

    def __init__(self, site: CallSite, policy: RetryPolicy | None) -> None:
        self.site = site
        self.schedule = Schedule(policy or NO_RETRY)

    def delay_after(self, exc: BaseException) -> float:
        """Seconds to wait before trying again after ``exc``.

        Raises:
            ClientError: ``exc`` converted (its subclass says what happened), when no retry
                follows: a kind not retried, or the last try.
        """
        error = to_client_error(exc, self.site, self.schedule.attempt)
        delay = self.schedule.next_delay(error.kind)
        if delay is None:
            raise error from None
        return delay


@dataclass
class InferCall:
    """One inference, built and ready to send: ``client.infer(model, tensors, **kwargs)``.

    Attributes:
        site: what the call is, for errors (the deadline in seconds included).
        retry: the policy (None: try once; sequence events and ``retry=False``).
        outputs: the output names read from the answer.
    """

    site: CallSite
    model: str
    tensors: list[Any]
    kwargs: dict[str, Any]
    retry: RetryPolicy | None
    outputs: list[str] = field(default_factory=list)


class ConnectionCore:
    """Settings of a connection and everything about a call that does no I/O (arguments as
    :class:`tritonrepo_client.TritonConnection`).

    Raises:
        ValueError: unknown protocol, TLS asked for HTTP, or a URL with a scheme.
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
        self.url = resolve_url(url, protocol, tls)
        # gRPC requests follow the guard's canary routes (HTTP ones pass the guard itself).
        self.routes = routes if protocol == "grpc" else None
        self.protocol = protocol
        self.timeout_s = timeout_s
        self.tls = tls
        self.retry = retry or RetryPolicy()
        self.module: Any = httpclient if protocol == "http" else grpcclient

    def site(self, what: str, timeout_s: float | None = None, **model: str) -> CallSite:
        """The :class:`CallSite` of a call named ``what`` with deadline ``timeout_s`` (None:
        the connection's); ``model``: ``model=`` / ``model_version=`` of an inference."""
        deadline = self.timeout_s if timeout_s is None else timeout_s
        return CallSite(what, self.url, self.protocol, deadline, self.tls is None, **model)

    def infer_call(
        self,
        model: str,
        inputs: dict[str, np.ndarray],
        outputs: Sequence[str],
        model_version: str,
        timeout_s: float | None,
        retry: bool,
        priority: int,
        timeout_us: int | None,
        class_count: int,
        kwargs: dict[str, Any],
    ) -> InferCall:
        """The :class:`InferCall` for the arguments of ``infer`` (see
        :meth:`tritonrepo_client.TritonConnection.infer`).

        Raises:
            ValueError: a bad ``priority`` / ``timeout_us``
                (:func:`tritonrepo_client.scheduling.scheduling_kwargs`).
        """
        deadline = self.timeout_s if timeout_s is None else timeout_s
        if self.routes is not None and not model_version:
            model = self.routes.pick(model)
        tensors, requested = build_request(self.module, inputs, outputs, class_count)
        kwargs = dict(kwargs)
        for key, value in scheduling_kwargs(priority, timeout_us, deadline).items():
            kwargs.setdefault(key, value)
        if self.protocol == "grpc":
            kwargs.setdefault("client_timeout", deadline)
        idempotent = retry and not kwargs.get("sequence_id")
        what = f"infer {model}" + (f" version {model_version}" if model_version else "")
        site = self.site(what, deadline, model=model, model_version=model_version)
        kwargs.update(model_version=model_version, outputs=requested)
        policy = self.retry if idempotent else None
        return InferCall(site, model, tensors, kwargs, policy, list(outputs))

    def config_arguments(self) -> dict[str, Any]:
        """Arguments of ``get_model_config`` that make both protocols answer JSON."""
        return {} if self.protocol == "http" else {"as_json": True}

    @staticmethod
    def config_of(answer: dict[str, Any]) -> dict[str, Any]:
        """The ModelConfig dict of a ``get_model_config`` answer (gRPC wraps it in
        ``{"config": ...}``)."""
        return answer.get("config", answer)

    @staticmethod
    def max_batch_size_of(config: dict[str, Any]) -> int:
        """A ModelConfig's ``max_batch_size`` (0 = no batching; gRPC's JSON leaves a 0 out)."""
        return int(config.get("max_batch_size", 0))

    @staticmethod
    def versions_of(metadata: Any) -> list[str]:
        """The loaded versions named by a ``get_model_metadata`` answer (a dict over HTTP, a
        protobuf over gRPC)."""
        versions = metadata["versions"] if isinstance(metadata, dict) else list(metadata.versions)
        return [str(v) for v in versions]

    @staticmethod
    def answers(result: Any, outputs: Sequence[str]) -> dict[str, np.ndarray]:
        """``{output name: array}`` of an ``InferResult``."""
        return {name: result.as_numpy(name) for name in outputs}


class ModelClientCore:
    """Settings of a per-model client (arguments as
    :class:`tritonrepo_client.connection.ModelClient`); subclasses name the connection type."""

    DEFAULT_MODEL = ""
    CONNECTION: type = ConnectionCore

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
        self.connection: Any = self.CONNECTION(url, protocol, timeout_s, tls, retry)
        self.model = model or self.DEFAULT_MODEL
        self.priority = priority
        self.timeout_us = timeout_us
        self._max_batch_size: int | None = None

    def scheduling(self, priority: int | None, timeout_us: int | None) -> dict[str, Any]:
        """``priority`` / ``timeout_us`` arguments of ``infer``: a call's own, else the
        client's."""
        return {
            "priority": self.priority if priority is None else priority,
            "timeout_us": self.timeout_us if timeout_us is None else timeout_us,
        }


__all__ = [
    "DEFAULT_URLS",
    "CallAttempts",
    "ClientError",
    "ConnectionCore",
    "GrpcTls",
    "InferCall",
    "ModelClientCore",
    "Protocol",
    "build_request",
    "grpc_tls_arguments",
    "resolve_url",
]
