"""One connection to a Triton server over HTTP or gRPC, with errors explained in one line."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

Protocol = Literal["http", "grpc"]
DEFAULT_URLS: dict[str, str] = {"http": "127.0.0.1:8000", "grpc": "127.0.0.1:8001"}
T = TypeVar("T")


class ClientError(RuntimeError):
    """The server answered with an error; the message is Triton's, on one line."""


class ServerUnreachable(ClientError):
    """No Triton server answers at the URL."""


class VersionNotLoaded(ClientError):
    """A request named a model version that the server has not loaded."""


# gRPC reports connection failures as UNAVAILABLE with one of these texts; Triton also uses
# UNAVAILABLE for its own errors (e.g. an unknown model), so the status alone is not enough.
_UNREACHABLE_TEXTS = ("failed to connect", "connection refused", "socket closed", "dns resolution")


def _is_unreachable(exc: BaseException) -> bool:
    if isinstance(exc, (ConnectionError, OSError, TimeoutError)):
        return True
    if isinstance(exc, InferenceServerException):
        text = str(exc.message() or "").lower()
        return any(marker in text for marker in _UNREACHABLE_TEXTS)
    return False


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


class TritonConnection:
    """A tritonclient HTTP or gRPC client behind one interface.

    Args:
        url: ``host:port`` (default 127.0.0.1:8000 for HTTP, 127.0.0.1:8001 for gRPC).
        protocol: ``"http"`` or ``"grpc"``.
        timeout_s: network timeout in seconds for connecting and for each call.
        tls: gRPC over TLS (HTTP TLS ends at the reverse proxy of the container path).

    Raises:
        ValueError: unknown protocol, or TLS asked for HTTP.
    """

    def __init__(
        self,
        url: str | None = None,
        protocol: Protocol = "http",
        timeout_s: float = 60.0,
        tls: GrpcTls | None = None,
    ) -> None:
        if protocol not in DEFAULT_URLS:
            raise ValueError(f"protocol must be 'http' or 'grpc', got {protocol!r}")
        if tls is not None and protocol != "grpc":
            raise ValueError("TLS is for the gRPC endpoint; HTTP TLS ends at a reverse proxy")
        self.protocol = protocol
        self.url = url or DEFAULT_URLS[protocol]
        self.timeout_s = timeout_s
        self.module: Any = httpclient if protocol == "http" else grpcclient
        if protocol == "http":
            self.client: Any = httpclient.InferenceServerClient(
                self.url, connection_timeout=timeout_s, network_timeout=timeout_s
            )
        elif tls is None:
            self.client = grpcclient.InferenceServerClient(self.url)
        else:
            self.client = grpcclient.InferenceServerClient(
                self.url,
                ssl=True,
                root_certificates=str(tls.root_cert),
                private_key=str(tls.client_key) if tls.client_key else None,
                certificate_chain=str(tls.client_cert) if tls.client_cert else None,
            )

    def call(self, what: str, fn: Callable[[], T]) -> T:
        """Run ``fn``, translating failures into :class:`ClientError` / :class:`ServerUnreachable`.

        ``what`` names the action in the message (e.g. "infer text_embedding").
        """
        try:
            return fn()
        except Exception as exc:
            if _is_unreachable(exc):
                raise ServerUnreachable(
                    f"cannot reach Triton at {self.url} over {self.protocol} ({what}): "
                    f"{_reason(exc)}; is the server running (`make serve`) and the URL right?"
                ) from None
            raise ClientError(f"{what} failed: {_reason(exc)}") from None

    def model_config(self, model: str) -> dict[str, Any]:
        """The model's configuration as a dict (ModelConfig JSON field names)."""
        if self.protocol == "http":
            return self.call(f"config of {model}", lambda: self.client.get_model_config(model))
        result = self.call(
            f"config of {model}", lambda: self.client.get_model_config(model, as_json=True)
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
        **kwargs: Any,
    ) -> dict[str, np.ndarray]:
        """One inference; ``inputs`` are numpy arrays (object arrays of bytes for BYTES).

        Returns ``{output name: array}``.

        Raises:
            ServerUnreachable, ClientError: see :meth:`call`.
        """
        tensors = []
        for name, value in inputs.items():
            dtype = "BYTES" if value.dtype == object else np_to_triton_dtype(value.dtype)
            tensor = self.module.InferInput(name, list(value.shape), dtype)
            tensor.set_data_from_numpy(value)
            tensors.append(tensor)
        requested = [self.module.InferRequestedOutput(name) for name in outputs]
        if self.protocol == "grpc":
            kwargs.setdefault("client_timeout", self.timeout_s)
        what = f"infer {model}" + (f" version {model_version}" if model_version else "")
        try:
            result = self.call(
                what,
                lambda: self.client.infer(
                    model, tensors, model_version=model_version, outputs=requested, **kwargs
                ),
            )
        except ServerUnreachable:
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
        """Close the underlying client."""
        with contextlib.suppress(Exception):
            self.client.close()

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
        timeout_s: network timeout per call, seconds.
        tls: gRPC over TLS (:class:`GrpcTls`).
    """

    DEFAULT_MODEL = ""

    def __init__(
        self,
        url: str | None = None,
        protocol: Protocol = "http",
        model: str | None = None,
        timeout_s: float = 60.0,
        tls: GrpcTls | None = None,
    ) -> None:
        self.connection = TritonConnection(url, protocol, timeout_s, tls)
        self.model = model or self.DEFAULT_MODEL

    def close(self) -> None:
        """Close the connection."""
        self.connection.close()

    def __enter__(self: M) -> M:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


M = TypeVar("M", bound=ModelClient)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, InferenceServerException):
        text = exc.message() or str(exc)
    else:
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return " ".join(str(text).split())
