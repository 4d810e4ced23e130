"""Explicit model control: the repository index, load (with config/file overrides), unload.

These calls belong to Triton's model-repository API, which this project's launcher restricts
with a key (:mod:`tritonrepo.repository_key`); :class:`RepositoryClient` sends it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from tritonrepo import repository_key
from tritonrepo_client.connection import (
    ClientError,
    GrpcTls,
    Protocol,
    ServerUnreachable,
    TritonConnection,
)

T = TypeVar("T")


@dataclass(frozen=True)
class ModelVersionState:
    """One row of the repository index. ``version`` is "" for a model never loaded."""

    name: str
    version: str
    state: str
    reason: str = ""


class RepositoryClient:
    """Model-repository API over HTTP or gRPC.

    Args:
        url: ``host:port``; protocol default ports apply when ``None``.
        protocol: ``"http"`` or ``"grpc"``.
        key: the model-repository key; ``None`` resolves it like the launcher does
            (``$TRITONREPO_REPOSITORY_KEY``, ``$TRITONREPO_REPOSITORY_KEY_FILE``,
            ``build/repository.key``); ``""`` sends none.
        timeout_s: network timeout per call, seconds (loads can take a while).
        tls: gRPC over TLS (:class:`tritonrepo_client.connection.GrpcTls`).
    """

    def __init__(
        self,
        url: str | None = None,
        protocol: Protocol = "http",
        key: str | None = None,
        timeout_s: float = 300.0,
        tls: GrpcTls | None = None,
    ) -> None:
        self.connection = TritonConnection(url, protocol, timeout_s, tls)
        self.protocol = protocol
        self.key = repository_key.resolve_key() if key is None else key
        self.headers = repository_key.headers(self.key, protocol)

    @property
    def _client(self) -> Any:
        return self.connection.client

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """:meth:`TritonConnection.call`, saying whether a refused key was missing or wrong
        (Triton's own message names the expected header in both cases)."""
        try:
            return self.connection.call(what, fn)
        except ServerUnreachable:
            raise
        except ClientError as exc:
            if "is restricted" not in str(exc):
                raise
            if self.key:
                hint = "the repository key sent was not accepted"
            else:
                hint = (
                    f"no repository key configured (set ${repository_key.ENV_KEY}, "
                    f"${repository_key.ENV_KEY_FILE} or --repository-key-file)"
                )
            raise ClientError(f"{what} refused: {hint}; Triton: {exc}") from None

    def index(self) -> list[ModelVersionState]:
        """Every model of the repository with each known version's state (READY, UNLOADING,
        UNAVAILABLE, ...) and the reason Triton gives for a non-READY one."""
        if self.protocol == "http":
            rows = self._call(
                "repository index",
                lambda: self._client.get_model_repository_index(headers=self.headers),
            )
        else:
            rows = self._call(
                "repository index",
                lambda: self._client.get_model_repository_index(headers=self.headers, as_json=True),
            ).get("models", [])
        return [
            ModelVersionState(
                r["name"], str(r.get("version", "")), r.get("state", ""), r.get("reason", "")
            )
            for r in rows
        ]

    def versions(self, model: str, states: tuple[str, ...] = ("READY",)) -> list[int]:
        """Versions of ``model`` whose state is in ``states``, ascending."""
        return sorted(
            int(row.version)
            for row in self.index()
            if row.name == model and row.state in states and row.version
        )

    def config(self, model: str) -> dict[str, Any]:
        """The loaded model's effective configuration (ModelConfig JSON field names)."""
        return self.connection.model_config(model)

    def load(
        self,
        model: str,
        config: dict[str, Any] | None = None,
        files: dict[str, bytes] | None = None,
    ) -> None:
        """Load or reload ``model``; returns when Triton has finished (or raises).

        ``config`` replaces the on-disk config for this load (and later plain loads: Triton
        keeps an override until the model is unloaded). ``files`` maps ``"file:<version>/<name>"``
        to content; with files, the uploaded versions replace the model's folder, so upload every
        version the ``config``'s version_policy names.

        Raises:
            ClientError: Triton refused or the load failed (its message says why).
            ValueError: ``files`` without ``config`` (Triton requires both).
        """
        if files and config is None:
            raise ValueError("Triton's load API takes file overrides only with a config")
        payload = json.dumps(config) if config is not None else None
        self._call(
            f"load {model}",
            lambda: self._client.load_model(
                model, headers=self.headers, config=payload, files=files
            ),
        )

    def unload(self, model: str, dependents: bool = False) -> None:
        """Unload ``model`` (and, with ``dependents``, the models it uses, e.g. ensemble steps).

        Raises:
            ClientError: Triton refused (e.g. missing key).
        """
        self._call(
            f"unload {model}",
            lambda: self._client.unload_model(
                model, headers=self.headers, unload_dependents=dependents
            ),
        )

    def ready(self, model: str, version: str = "") -> bool:
        """Whether ``model`` (or one ``version``) is READY; needs no key."""
        return self.connection.model_ready(model, version)

    def wait_until(
        self, model: str, gone: list[int], timeout_s: float, poll_s: float = 0.1
    ) -> None:
        """Wait until none of versions ``gone`` of ``model`` is READY or UNLOADING, i.e. their
        in-flight requests have finished and they are unloaded.

        Raises:
            TimeoutError: still there after ``timeout_s`` seconds.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            left = set(self.versions(model, ("READY", "UNLOADING"))) & set(gone)
            if not left:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"version(s) {sorted(left)} of {model} still loaded after {timeout_s:.0f} s"
                )
            time.sleep(poll_s)

    def close(self) -> None:
        """Close the connection."""
        self.connection.close()

    def __enter__(self) -> RepositoryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["ClientError", "ModelVersionState", "RepositoryClient"]
