"""The tables every description shape shares, as types: :class:`Tensor` (``[[input]]``,
``[[output]]``, a step's ``outputs``), :class:`Deployment` (a config set of a model),
:class:`Step` (a Python-backend step) and :class:`Core` (a core model); the error a description
raises (:class:`DescriptionError`) and the constants of the format.

Types only: :mod:`tritonrepo.description.parse` reads them from the TOML.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tritonrepo_format.config_sets import CONFIG_SETS as CONFIG_SET_TABLE
from tritonrepo_format.dtypes import DATA_TYPES

DESCRIPTION_FILE = "pipeline.toml"
DEFAULT_MAX_BATCH_SIZE = 32
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,47}$")  # a model name and a Python identifier
REF_PATTERN = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")  # package.module:attribute

# Triton's data types a description may use (model_config.proto DataType, without TYPE_; BF16
# has no numpy type) and their numpy types: the one table,
# tritonrepo_format.dtypes (the description reader is generator-side code,
# which reads the repository through that bottom layer; tests/layers.py).
DTYPES: Mapping[str, str] = {d.name: d.numpy_name for d in DATA_TYPES if d.has_numpy}
# The config sets a description deploys (the table of
# tritonrepo_format.config_sets): config.pbtxt, configs/cpu.pbtxt,
# configs/torch_gpu.pbtxt.
CONFIG_SETS = tuple(CONFIG_SET_TABLE)


class DescriptionError(ValueError):
    """A description cannot be used; ``problems`` holds one line per problem, each
    ``<file>: <field>: <what is wrong>; <the fix>``."""

    def __init__(self, source: Path | str, problems: Sequence[str]) -> None:
        self.problems = [f"{source}: {p}" for p in problems]
        super().__init__("\n".join(self.problems))


@dataclass(frozen=True)
class Tensor:
    """A tensor of a request, response or step: ``dims`` exclude the batch dim, ``-1`` = any
    size; ``dtype`` is a Triton name (``FP32``, ``BYTES``, ...)."""

    name: str
    dtype: str
    dims: tuple[int, ...]
    optional: bool = False
    doc: str = ""
    label_filename: str | None = None  # classification extension: file of class names

    @property
    def numpy_dtype(self) -> str:
        """The numpy dtype name (``object`` for BYTES)."""
        return DTYPES[self.dtype]

    def fits(self, declared: Tensor) -> bool:
        """Whether this tensor can be given where ``declared`` is expected: the same dtype,
        the same rank, and each dim equal or ``-1`` (any size) on either side."""
        return (
            self.dtype == declared.dtype
            and len(self.dims) == len(declared.dims)
            and all(a == b or -1 in (a, b) for a, b in zip(self.dims, declared.dims, strict=True))
        )


@dataclass(frozen=True)
class Deployment:
    """How one config set runs a model: instances per device, batching, parameters.

    ``max_queue_delay_us`` is the dynamic batcher's ``max_queue_delay_microseconds`` (µs);
    ``preferred_batch_sizes`` its ``preferred_batch_size`` (empty = none); ``max_batch_size``
    overrides the pipeline's when set (a core model may batch more rows than one request has).
    ``ragged_inputs`` names the model's inputs declared ``allow_ragged_batch: true`` in this set
    (the batcher joins requests whose shapes differ along their non-batch dims; the backend must
    take such a batch, as ``onnxruntime_python`` with ``sequence_mask_input`` does).
    ``priority_levels`` (a core model only: 0 or 2) gives the set's dynamic batcher Triton's two
    priority levels with bounded queues and queue timeouts
    (:data:`tritonrepo.server.queue_policy.CORE_CPU` / ``CORE_GPU``); 0, the default, keeps
    Triton's plain queue, the only one with which the batcher never waits 500 ms for a free
    instance (docs/known_issues.md).
    """

    instances: int = 1
    max_queue_delay_us: int = 0
    preferred_batch_sizes: tuple[int, ...] = ()
    max_batch_size: int | None = None
    parameters: Mapping[str, str] = field(default_factory=dict)
    doc: str = ""
    ragged_inputs: tuple[str, ...] = ()
    priority_levels: int = 0


@dataclass(frozen=True)
class Step:
    """A Python-backend step: the user's ``function`` (``module:function``) or a ``step`` class
    (``module:Class``, a ``PythonStep`` subclass), its extra ``outputs`` (preprocess: tensors
    for postprocess besides the core model's inputs), its config sets (``deployments``: at
    least ``default``, the ``config.pbtxt``) and the models its step class ``calls`` through BLS
    (written into every config set as the ``tritonrepo_calls`` parameter, so the launcher and
    ``tritonrepo-client models load`` load them with the pipeline)."""

    model: str
    function: str | None
    step: str | None
    outputs: tuple[Tensor, ...]
    deployments: Mapping[str, Deployment]
    doc: str = ""
    calls: tuple[str, ...] = ()  # models its step class calls through BLS (tritonrepo_calls)

    @property
    def ref(self) -> str:
        """What runs: the function or the step class reference."""
        return self.function or self.step or ""


@dataclass(frozen=True)
class Core:
    """The core model: an ``onnx`` file, a ``build`` function, or a ``builder`` module of this
    repository that writes it; the ``versions`` that serve; ``int8`` also builds version 2
    (ONNX Runtime static INT8, calibrated on the samples); per-config-set ``deployments``;
    ``fixed_dims`` fixes dynamic non-batch dims of graph inputs (name -> dims); ``constants``
    binds graph inputs to fixed values at build time (name -> a number or nested lists: the
    input becomes a constant of the graph, of its dtype, so no request or step sends it)."""

    model: str
    onnx: str | None
    build: str | None
    builder: str | None
    versions: tuple[int, ...]
    int8: bool
    deployments: Mapping[str, Deployment]
    fixed_dims: Mapping[str, tuple[int, ...]]
    same_shape_batches: bool
    doc: str = ""
    inputs: tuple[Tensor, ...] = ()  # declared I/O: required for a builder core
    outputs: tuple[Tensor, ...] = ()
    constants: Mapping[str, Any] = field(default_factory=dict)
