"""Explicit model control: the repository index, load (with config/file overrides), unload.

These calls belong to Triton's model-repository API, which this project's launcher restricts
with a key (:mod:`tritonrepo.server.repository_key`); :class:`RepositoryClient` sends it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from tritonrepo_client.connection import (
    ClientError,
    GrpcTls,
    Protocol,
    ServerUnreachable,
    TritonConnection,
)
from tritonrepo_client.control import repository_key
from tritonrepo_client.control.health_index import one_line
from tritonrepo_client.control.model_calls import (
    ConfigReader,
    load_closure,
    server_configs,
    used_models,
)
from tritonrepo_client.triton_messages import Kind, kinds_in
from tritonrepo_client.validation import check_config, check_files

T = TypeVar("T")


class ControlTimeout(ClientError):
    """A load or unload did not finish within its deadline; the message gives the model's
    state from the repository index."""


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
        timeout_s: deadline of each call, seconds, loads and unloads included (they are run
            on a worker thread and abandoned when it passes: :class:`ControlTimeout`); index
            and config calls take a shorter one of their own where given.
        tls: gRPC over TLS (:class:`tritonrepo_client.connection.GrpcTls`).

    Triton 2.51 runs an HTTP load on the frontend thread that serves its connection, so a load
    that never returns (a Python model without model.py) leaves that thread blocked, and the
    keep-alive connections it serves stop answering any request: bounded calls (``timeout_s``)
    end such a wait, and the next call opens a fresh connection, which is served elsewhere.
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
        self.timeout_s = timeout_s
        self._tls = tls
        # model -> time.monotonic() when a load or unload of it was abandoned at its deadline.
        self._abandoned: dict[str, float] = {}
        self._last_rows: list[ModelVersionState] = []  # what _state_line last read
        self.key = repository_key.resolve_key() if key is None else key
        self.headers = repository_key.headers(self.key, protocol)

    @property
    def _client(self) -> Any:
        return self.connection.client

    def _call(
        self,
        what: str,
        fn: Callable[[], T],
        conn: TritonConnection | None = None,
        timeout_s: float | None = None,
    ) -> T:
        """:meth:`TritonConnection.call` (on ``conn``, default this client's connection; HTTP
        calls end after ``timeout_s`` seconds when given), saying whether a refused key was
        missing or wrong (Triton's own message names the expected header in both cases)."""
        try:
            return (conn or self.connection).call(what, fn, timeout_s=timeout_s)
        except ServerUnreachable:
            raise
        except ClientError as exc:
            if Kind.RESTRICTED not in kinds_in(str(exc)):
                raise
            if self.key:
                hint = "the repository key sent was not accepted"
            else:
                hint = (
                    f"no repository key configured (set ${repository_key.ENV_KEY}, "
                    f"${repository_key.ENV_KEY_FILE} or --repository-key-file)"
                )
            raise ClientError(f"{what} refused: {hint}; Triton: {exc}") from None

    def index(self, timeout_s: float | None = None) -> list[ModelVersionState]:
        """Every model of the repository with each known version's state (READY, UNLOADING,
        UNAVAILABLE, ...) and the reason Triton gives for a non-READY one.

        Args:
            timeout_s: deadline, seconds (default: the client's ``timeout_s``).

        Raises:
            DeadlineExceeded: no answer within the deadline.
            ClientError: Triton refused (e.g. missing key).
        """
        if self.protocol == "http":
            rows = self._call(
                "repository index",
                lambda: self._client.get_model_repository_index(headers=self.headers),
                timeout_s=timeout_s,
            )
        else:
            rows = self._call(
                "repository index",
                lambda: self._client.get_model_repository_index(
                    headers=self.headers, as_json=True, client_timeout=timeout_s
                ),
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

    def config(self, model: str, timeout_s: float | None = None) -> dict[str, Any]:
        """The loaded model's effective configuration (ModelConfig JSON field names).

        Args:
            timeout_s: deadline, seconds (default: the client's ``timeout_s``).

        Raises:
            DeadlineExceeded: no answer within the deadline.
            ClientError: the model is not loaded, or the call failed.
        """
        if timeout_s is None:
            return self.connection.model_config(model)
        if self.protocol == "http":
            return self._call(
                f"config of {model}",
                lambda: self._client.get_model_config(model),
                timeout_s=timeout_s,
            )
        return self._call(
            f"config of {model}",
            lambda: self._client.get_model_config(model, as_json=True, client_timeout=timeout_s),
        )["config"]

    def states(self, model: str, timeout_s: float | None = None) -> list[ModelVersionState]:
        """The index rows of ``model`` ([] when Triton does not list it)."""
        return [r for r in self.index(timeout_s) if r.name == model]

    def abandoned_s(self, model: str) -> float | None:
        """Seconds since this client abandoned a load or unload of ``model`` at its deadline
        (:class:`ControlTimeout`), None if none was since its last one that returned. Triton
        may still be working on it: it has no way to cancel a load, and a second load of the
        model waits behind the first (holding one more of its HTTP frontend threads)."""
        since = self._abandoned.get(model)
        return None if since is None else time.monotonic() - since

    def load(
        self,
        model: str,
        config: dict[str, Any] | None = None,
        files: dict[str, bytes] | None = None,
        timeout_s: float | None = None,
    ) -> None:
        """Load or reload ``model``; returns when Triton has finished (or raises).

        ``config`` replaces the on-disk config for this load (and later plain loads: Triton
        keeps an override until the model is unloaded). ``files`` maps ``"file:<version>/<name>"``
        to content; with files, the uploaded versions replace the model's folder, so upload every
        version the ``config``'s version_policy names. Both are checked before anything is sent
        (:mod:`tritonrepo_client.validation`).

        Args:
            timeout_s: deadline in seconds (default: the client's ``timeout_s``).

        Raises:
            InvalidOverride: ``config`` does not parse into ModelConfig, or a Python model's
                uploaded version lacks model.py.
            ControlTimeout: not finished within the deadline (the message gives its state).
            ClientError: Triton refused or the load failed (its message says why, followed by
                what the repository index says of the model: the reason of a failed version).
            ValueError: ``files`` without ``config`` (Triton requires both).
        """
        if files and config is None:
            raise ValueError("Triton's load API takes file overrides only with a config")
        if config is not None:
            check_config(config, f"config override of {model}")
            check_files(config, files or {}, f"override files of {model}")
        payload = json.dumps(config) if config is not None else None
        try:
            self._with_deadline(
                f"load {model}",
                model,
                timeout_s,
                lambda client: client.load_model(
                    model, headers=self.headers, config=payload, files=files
                ),
            )
        except (ControlTimeout, ServerUnreachable):
            raise
        except ClientError as exc:
            if Kind.RESTRICTED in kinds_in(str(exc)):
                raise  # the key was refused (_call says why); the index would be refused too
            detail = self._state_line(model)
            reasons = [r.reason for r in self._last_rows if r.reason]
            if reasons and all(reason in str(exc) for reason in reasons):
                raise  # Triton's message already gives the index's reasons
            raise type(exc)(f"{exc}; {detail}") from None

    def unload(self, model: str, dependents: bool = False, timeout_s: float | None = None) -> None:
        """Unload ``model`` (and, with ``dependents``, the models it uses: ensemble steps and
        the models it calls through BLS).

        With ``dependents``, Triton's own ``unload_dependents`` leaves loaded every step that
        was loaded with a config override (a ``configs use`` switch, a rollout, a heal reload:
        measured on 2.51), and it does not know BLS calls; so the models ``model`` uses
        (:func:`tritonrepo_client.control.model_calls.used_models`: its ensemble graph, the
        models it declares it calls, recursively) that no other loaded model uses and that are
        still loaded are then unloaded one by one.

        Args:
            timeout_s: deadline in seconds of each unload call (default: the client's
                ``timeout_s``).

        Raises:
            ControlTimeout: not finished within the deadline.
            ClientError: Triton refused (e.g. missing key).
        """
        config_of = server_configs(self.config)
        used = used_models([model], config_of) - {model} if dependents else set()
        self._with_deadline(
            f"unload {model}",
            model,
            timeout_s,
            lambda client: client.unload_model(
                model, headers=self.headers, unload_dependents=dependents
            ),
        )
        if not used:
            return
        loaded = {r.name for r in self.index(timeout_s) if r.state in ("READY", "LOADING")}
        in_use = used_models(loaded - used - {model}, config_of)
        for other in sorted((used & loaded) - in_use):
            self._with_deadline(
                f"unload {other}",
                other,
                timeout_s,
                lambda client, other=other: client.unload_model(other, headers=self.headers),
            )

    def calls_to_load(
        self,
        model: str,
        config: Mapping[str, Any] | None = None,
        local: ConfigReader | None = None,
    ) -> tuple[str, ...]:
        """The models ``model`` calls through BLS, as its config declares them
        (:func:`tritonrepo_client.control.model_calls.load_closure`: its ensemble steps' and
        the called models' own calls included), each before its caller.

        Each config is read from ``config`` (an override for ``model``'s load), else the
        server's config of a loaded model, else ``local`` (the model repository on this
        machine, e.g. :func:`~tritonrepo_client.control.model_calls.disk_configs`).
        """
        server = server_configs(self.config)
        loaded = {r.name for r in self.index() if r.state == "READY"}

        def config_of(name: str) -> Mapping[str, Any] | None:
            if name == model and config is not None:
                return config
            if name in loaded:
                found = server(name)
                if found is not None:
                    return found
            return local(name) if local is not None else None

        return load_closure([model], config_of)

    def _with_deadline(
        self, what: str, model: str, timeout_s: float | None, fn: Callable[[Any], object]
    ) -> None:
        """Run ``fn(client)`` on a worker thread with a connection of its own (tritonclient's
        HTTP client belongs to the thread that made it), and give up after ``timeout_s``
        seconds: Triton's load call has no deadline of its own and never returns for some
        broken models. The abandoned call is left to finish or hang in its daemon thread."""
        deadline = self.timeout_s if timeout_s is None else timeout_s
        outcome: dict[str, BaseException | None] = {}

        def work() -> None:
            try:
                with TritonConnection(
                    self.connection.url, self.protocol, deadline + 5.0, self._tls
                ) as conn:
                    self._call(what, lambda: fn(conn.client), conn)
                outcome["error"] = None
            except BaseException as exc:  # handed to the caller's thread
                outcome["error"] = exc

        worker = threading.Thread(target=work, name=f"tritonrepo {what}", daemon=True)
        worker.start()
        worker.join(deadline)
        if "error" not in outcome:
            self._abandoned[model] = time.monotonic()
            # This client's keep-alive connection may be served by the frontend thread the
            # abandoned call blocks (see the class docstring): answers come on a new one. The
            # old one is not closed under a thread that may be using it; its sockets close
            # when it is collected.
            self.connection = TritonConnection(
                self.connection.url, self.protocol, self.timeout_s, self._tls
            )
            raise ControlTimeout(
                f"{what} did not finish within {deadline:.0f} s; {self._state_line(model)}"
            )
        self._abandoned.pop(model, None)
        if outcome["error"] is not None:
            raise outcome["error"]

    def _state_line(self, model: str) -> str:
        """What the index says of ``model`` now, e.g. "Triton reports x version 1: LOADING"."""
        self._last_rows = []
        try:
            rows = self._last_rows = self.states(model, min(self.timeout_s, 30.0))
        except ClientError as exc:
            return f"its state is unknown ({exc})"
        if not rows:
            return f"Triton does not list {model} in its repository index (no such model folder)"
        if all(not r.version and not r.state for r in rows):
            return (
                f"Triton lists {model} but could not read its config (its log says 'Poll failed "
                "for model directory'); `python -m tritonrepo.server.preflight --model "
                f"{model}` on the server's repository names the file, line and column"
            )
        states = "; ".join(
            f"version {r.version or '-'}: {r.state or 'unknown'}"
            + (f" ({one_line(r.reason)})" if r.reason else "")
            for r in rows
        )
        hint = ""
        if any(r.state == "LOADING" for r in rows):
            hint = (
                "; a model stuck LOADING (e.g. a Python model without model.py) is only cleared "
                "by a server restart"
            )
        return f"Triton reports {model} {states}{hint}"

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


__all__ = ["ClientError", "ControlTimeout", "ModelVersionState", "RepositoryClient"]
