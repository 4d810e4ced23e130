"""Clients of any served model, by name: :class:`PipelineClient` (threads) and
:class:`AsyncPipelineClient` (asyncio). They read the model's tensors from Triton (metadata and
config, once per version), check each call's arrays against them before sending
(:mod:`tritonrepo_client.pipeline_requests`) and answer ``{output name: array}``.

Example::

    with PipelineClient("text_embedding", "127.0.0.1:8000") as client:
        answer = client.infer({"TEXT": [["A man is eating food."]]})
        answer["EMBEDDING"]   # float32 [1, 384]

A stateful pipeline (sequence batching) takes each event with its stream's ID and the START and
END flags: ``client.infer(event, sequence_id=7, sequence_start=True)``, or a
:class:`PipelineSession` that sets them (``client.session(7)``: START with its first event,
END with the one sent with ``end=True``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tritonrepo_client.async_connection import AsyncModelClient
from tritonrepo_client.connection import ModelClient
from tritonrepo_client.core import GrpcTls, Protocol
from tritonrepo_client.errors import ClientError, VersionNotLoaded, version_not_loaded
from tritonrepo_client.pipeline_requests import (
    ModelSignature,
    config_of,
    metadata_arguments,
    names_version_not_loaded,
    prepare_inputs,
    requested_outputs,
    signature_of,
    version_text,
)
from tritonrepo_client.retry import RetryPolicy
from tritonrepo_client.validation import check_correlation_id


def sequence_options(
    protocol: str, sequence_id: int | str | None, start: bool, end: bool
) -> dict[str, Any]:
    """tritonclient's ``infer`` arguments of one event of a sequence, or {} without one.

    Raises:
        InvalidCorrelationId: (a ValueError) an ID Triton would refuse
            (:func:`tritonrepo_client.validation.check_correlation_id`).
        ValueError: START or END without a ``sequence_id``.
    """
    if sequence_id is None:
        if start or end:
            raise ValueError("sequence_start and sequence_end need a sequence_id")
        return {}
    check_correlation_id(sequence_id, "sequence_id", protocol)
    return {"sequence_id": sequence_id, "sequence_start": start, "sequence_end": end}


class _Stream:
    """What both sessions share: the stream's ID, whether it started and ended, and the flags
    of its next event."""

    def __init__(self, sequence_id: int | str) -> None:
        self.sequence_id = sequence_id
        self.started = False
        self.ended = False

    def _flags(self, end: bool) -> dict[str, Any]:
        """``infer`` arguments of the next event.

        Raises:
            RuntimeError: the stream has ended.
        """
        if self.ended:
            raise RuntimeError(f"sequence {self.sequence_id!r} has ended: open a new session")
        return {"sequence_id": self.sequence_id, "sequence_start": not self.started,
                "sequence_end": end}  # fmt: skip

    def _answered(self, end: bool) -> None:
        self.started, self.ended = True, end


class PipelineSession(_Stream):
    """One stream of a stateful pipeline: :meth:`send` carries START with the first event and
    END with the one sent with ``end=True`` (Triton ends a sequence only with a request; a
    stream left open is dropped after the model's idle timeout). Created by
    :meth:`PipelineClient.session`; send its events one at a time, in order. Events are never
    retried (the server may have recorded an event whose answer was lost)."""

    def __init__(self, client: PipelineClient, sequence_id: int | str) -> None:
        super().__init__(sequence_id)
        self.client = client

    def send(
        self, inputs: Mapping[str, Any], end: bool = False, outputs: Sequence[str] | None = None,
        timeout_s: float | None = None,
    ) -> dict[str, np.ndarray]:  # fmt: skip
        """One event's answer (as :meth:`PipelineClient.infer`).

        Raises:
            RuntimeError: the stream has ended (nothing is sent).
            ValueError, ClientError: as :meth:`PipelineClient.infer`; a refused event leaves
                the stream as it was (START goes with the next event if it was the first).
        """
        answer = self.client.infer(inputs, outputs, timeout_s=timeout_s, **self._flags(end))
        self._answered(end)
        return answer


class AsyncPipelineSession(_Stream):
    """:class:`PipelineSession` for asyncio (created by :meth:`AsyncPipelineClient.session`)."""

    def __init__(self, client: AsyncPipelineClient, sequence_id: int | str) -> None:
        super().__init__(sequence_id)
        self.client = client

    async def send(
        self, inputs: Mapping[str, Any], end: bool = False, outputs: Sequence[str] | None = None,
        timeout_s: float | None = None,
    ) -> dict[str, np.ndarray]:  # fmt: skip
        """One event's answer (as :meth:`PipelineSession.send`).

        Raises:
            RuntimeError, ValueError, ClientError: as :meth:`PipelineSession.send`.
        """
        answer = await self.client.infer(inputs, outputs, timeout_s=timeout_s,
                                         **self._flags(end))  # fmt: skip
        self._answered(end)
        return answer


class _PipelineSettings:
    """What both pipeline clients add to their base: the model named first, signatures cached
    per version."""

    model: str
    connection: Any

    def _settings(self, model: str) -> None:
        if not isinstance(model, str) or not model:
            raise ValueError(f"model must be a model name (non-empty str), got {model!r}")
        self._signatures: dict[str, ModelSignature] = {}

    def _fetch(self, timeout_s: float | None) -> tuple[float, dict[str, Any]]:
        """The deadline of a metadata/config call and its tritonclient keyword arguments."""
        deadline = self.connection.timeout_s if timeout_s is None else timeout_s
        return deadline, metadata_arguments(self.connection.protocol, deadline)


class PipelineClient(_PipelineSettings, ModelClient):
    """Inference on any served model, by tensor name.

    Args:
        model: the model's name (an ensemble or a single model).
        url, protocol, timeout_s, tls, retry, priority, timeout_us: as
            :class:`tritonrepo_client.connection.ModelClient`.

    Safe to share across threads (:class:`tritonrepo_client.TritonConnection`).

    Raises:
        ValueError: an empty model name, or a bad protocol, URL, priority or timeout.
    """

    def __init__(
        self,
        model: str,
        url: str | None = None,
        protocol: Protocol = "http",
        timeout_s: float = 60.0,
        tls: GrpcTls | None = None,
        retry: RetryPolicy | None = None,
        priority: int = 0,
        timeout_us: int | None = None,
    ) -> None:
        self._settings(model)
        super().__init__(url, protocol, model, timeout_s, tls, retry, priority, timeout_us)

    def signature(
        self, model_version: str | int | None = None, timeout_s: float | None = None
    ) -> ModelSignature:
        """The model's inputs and outputs (names, datatypes, shapes) and ``max_batch_size``,
        read from its metadata and config once per version (retried like inference).

        Raises:
            ValueError: a ``model_version`` that is not a version number.
            VersionNotLoaded: ``model_version`` is not loaded (the loaded ones are named).
            ServerUnreachable, DeadlineExceeded, ServerUnavailable, ClientError: the server
                cannot be reached or refused (e.g. an unknown model), in one line.
        """
        version = version_text(model_version)
        if version in self._signatures:
            return self._signatures[version]
        conn, model = self.connection, self.model
        deadline, args = self._fetch(timeout_s)
        try:
            metadata = conn.call(
                f"metadata of {model}",
                lambda: conn.client.get_model_metadata(model, version, **args),
                conn.retry,
                deadline,
            )
            config = conn.call(
                f"config of {model}",
                lambda: conn.client.get_model_config(model, version, **args),
                conn.retry,
                deadline,
            )
        except ClientError as exc:
            if version and names_version_not_loaded(exc):
                raise self._version_not_loaded(version) from None
            raise
        found = signature_of(metadata, config_of(config), version)
        self._signatures[version] = found
        return found

    def _version_not_loaded(self, version: str) -> VersionNotLoaded:
        try:
            loaded: list[str] | None = self.connection.model_versions(self.model)
        except ClientError:
            loaded = None
        return version_not_loaded(self.model, version, loaded)

    def infer(
        self,
        inputs: Mapping[str, Any],
        outputs: Sequence[str] | None = None,
        model_version: str | int | None = None,
        timeout_s: float | None = None,
        priority: int | None = None,
        timeout_us: int | None = None,
        sequence_id: int | str | None = None,
        sequence_start: bool = False,
        sequence_end: bool = False,
    ) -> dict[str, np.ndarray]:
        """One inference.

        Args:
            inputs: ``{input name: array-like}``: numpy arrays or nested lists, cast to each
                input's datatype when no value changes meaning (BYTES: ``str``/``bytes``
                items; :func:`tritonrepo_client.pipeline_requests.prepare_inputs`). With
                ``max_batch_size`` > 0 the first dim is the batch.
            outputs: output names to return (default: all of them).
            model_version: the version to run (None: the model's version policy).
            timeout_s: this call's deadline, seconds (default: the client's).
            priority, timeout_us: as :meth:`tritonrepo_client.TritonConnection.infer`
                (default: the client's).
            sequence_id, sequence_start, sequence_end: for a stateful pipeline, the event's
                stream (an int in 1..2**64-1, 2**63-1 over gRPC, or a str of 1..128 bytes) and
                its START and END flags (:meth:`session` sets them for you); such an event is
                never retried.

        Returns ``{output name: array}`` (BYTES outputs: object arrays of ``bytes``), in the
        order asked for, else the model's.

        Raises:
            ValueError: inputs or outputs that disagree with the model (named, with the fix),
                a bad ``priority`` / ``timeout_us``, or a bad ``sequence_id`` (or flags without
                one); nothing is sent then.
            VersionNotLoaded, ServerUnreachable, DeadlineExceeded, ServerUnavailable,
            RequestRejected, ClientError: as :meth:`tritonrepo_client.TritonConnection.infer`.
        """
        sequence = sequence_options(
            self.connection.protocol, sequence_id, sequence_start, sequence_end
        )
        found = self.signature(model_version, timeout_s)
        arrays = prepare_inputs(found, inputs)
        names = requested_outputs(found, outputs)
        options = self.scheduling(priority, timeout_us) | sequence
        return self.connection.infer(self.model, arrays, names, found.version, timeout_s, **options)

    def session(self, sequence_id: int | str) -> PipelineSession:
        """A new stream of this stateful pipeline (:class:`PipelineSession`).

        Raises:
            InvalidCorrelationId: (a ValueError) an ID Triton would refuse; nothing is sent.
        """
        check_correlation_id(sequence_id, "sequence_id", self.connection.protocol)
        return PipelineSession(self, sequence_id)


class AsyncPipelineClient(_PipelineSettings, AsyncModelClient):
    """:class:`PipelineClient` for asyncio: the same methods and arguments, awaited. Use it
    from one event loop.

    Raises:
        ValueError: as :class:`PipelineClient`.
    """

    def __init__(
        self,
        model: str,
        url: str | None = None,
        protocol: Protocol = "http",
        timeout_s: float = 60.0,
        tls: GrpcTls | None = None,
        retry: RetryPolicy | None = None,
        priority: int = 0,
        timeout_us: int | None = None,
    ) -> None:
        self._settings(model)
        super().__init__(url, protocol, model, timeout_s, tls, retry, priority, timeout_us)

    async def signature(
        self, model_version: str | int | None = None, timeout_s: float | None = None
    ) -> ModelSignature:
        """The model's tensors and ``max_batch_size`` (as :meth:`PipelineClient.signature`).

        Raises:
            ValueError, VersionNotLoaded, ServerUnreachable, DeadlineExceeded,
            ServerUnavailable, ClientError: as :meth:`PipelineClient.signature`.
        """
        version = version_text(model_version)
        if version in self._signatures:
            return self._signatures[version]
        conn, model = self.connection, self.model
        deadline, args = self._fetch(timeout_s)
        try:
            metadata = await conn.call(
                f"metadata of {model}",
                lambda: conn.client.get_model_metadata(model, version, **args),
                conn.retry,
                deadline,
            )
            config = await conn.call(
                f"config of {model}",
                lambda: conn.client.get_model_config(model, version, **args),
                conn.retry,
                deadline,
            )
        except ClientError as exc:
            if version and names_version_not_loaded(exc):
                raise await self._version_not_loaded(version) from None
            raise
        found = signature_of(metadata, config_of(config), version)
        self._signatures[version] = found
        return found

    async def _version_not_loaded(self, version: str) -> VersionNotLoaded:
        try:
            loaded: list[str] | None = await self.connection.model_versions(self.model)
        except ClientError:
            loaded = None
        return version_not_loaded(self.model, version, loaded)

    async def infer(
        self,
        inputs: Mapping[str, Any],
        outputs: Sequence[str] | None = None,
        model_version: str | int | None = None,
        timeout_s: float | None = None,
        priority: int | None = None,
        timeout_us: int | None = None,
        sequence_id: int | str | None = None,
        sequence_start: bool = False,
        sequence_end: bool = False,
    ) -> dict[str, np.ndarray]:
        """One inference (arguments, answer and errors as :meth:`PipelineClient.infer`).

        Raises:
            ValueError, VersionNotLoaded, ServerUnreachable, DeadlineExceeded,
            ServerUnavailable, RequestRejected, ClientError: as :meth:`PipelineClient.infer`.
        """
        sequence = sequence_options(
            self.connection.protocol, sequence_id, sequence_start, sequence_end
        )
        found = await self.signature(model_version, timeout_s)
        arrays = prepare_inputs(found, inputs)
        names = requested_outputs(found, outputs)
        options = self.scheduling(priority, timeout_us) | sequence
        return await self.connection.infer(
            self.model, arrays, names, found.version, timeout_s, **options
        )

    def session(self, sequence_id: int | str) -> AsyncPipelineSession:
        """A new stream of this stateful pipeline (:class:`AsyncPipelineSession`).

        Raises:
            InvalidCorrelationId: (a ValueError) an ID Triton would refuse; nothing is sent.
        """
        check_correlation_id(sequence_id, "sequence_id", self.connection.protocol)
        return AsyncPipelineSession(self, sequence_id)


__all__ = [
    "AsyncPipelineClient",
    "AsyncPipelineSession",
    "ModelSignature",
    "PipelineClient",
    "PipelineSession",
]
