"""What every description has, whatever its shape: :class:`Header` (the pipeline's name, summary,
request and response tensors, samples, probe, ``[canary]``, tests, source file).
:class:`~.Pipeline` (one core model) and :class:`~.GraphPipeline` (several) are headers with
their own tables."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritonrepo.description.schema.options import CanarySpec
from tritonrepo.description.schema.tables import Tensor


@dataclass(frozen=True, kw_only=True)
class Header:
    """The fields every description shape shares.

    Attributes:
        name: the pipeline's name (its served model: the ensemble or the session model).
        summary: one line about it (the first line of the configs' header comment).
        doc: more about it (the configs' header comment).
        max_batch_size: rows a request may carry (0: one request = one item, no batch dim).
        inputs: the request's tensors (``[[input]]``).
        outputs: the response's tensors (``[[output]]``).
        samples: ``module:function`` giving the sample requests (``[samples]``), or None.
        tests: whether the generator writes ``tests/pipelines/test_<name>.py``.
        source: the ``pipeline.toml`` read (absolute).
        probe: the ``[probe]`` table (KServe v2 JSON input tensors), or None.
        canary: the ``[canary]`` table: how a canary's answers are compared, or None (every
            output by a measure of its type: tritonrepo_client.control.canary_measures).
    """

    name: str
    summary: str
    doc: str
    max_batch_size: int
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    samples: str | None
    tests: bool
    source: Path
    probe: Mapping[str, Any] | None = None
    canary: CanarySpec | None = None

    def canary_parameter(self) -> dict[str, str]:
        """``{"tritonrepo_canary": JSON}`` for the served model's config, or ``{}``."""
        return self.canary.parameter() if self.canary is not None else {}

    @property
    def folder(self) -> Path:
        """The folder of the description (its code lives there too)."""
        return self.source.parent

    @property
    def models(self) -> tuple[str, ...]:
        """The names of the models the description makes (each shape says which)."""
        raise NotImplementedError

    @property
    def model_fields(self) -> tuple[str, ...]:
        """The description's field naming each of :attr:`models`."""
        raise NotImplementedError

    def called_models(self) -> tuple[str, ...]:
        """The models of other descriptions or of the repository that this description's
        steps call through BLS (none unless a shape says otherwise)."""
        return ()
