"""A pipeline described once: ``pipelines/<name>/pipeline.toml``, read into :class:`Pipeline`.

This module holds what a description reads into (:class:`Tensor`, :class:`Deployment`,
:class:`Step`, :class:`Core`, :class:`Pipeline`), the error it raises
(:class:`DescriptionError`) and its constants; :mod:`tritonrepo.description.load` reads the file.

The file is TOML (read with the standard library's ``tomllib``; Python 3.10 reads it with
``tomli`` when installed). Its fields, their defaults and an example are in
``docs/models/add_your_own_model.md``. :func:`~tritonrepo.description.load` checks the file's
own structure (types, names, dtypes, dims, references) and raises one :class:`DescriptionError`
listing every problem, each naming its field and the fix; the checks that need the ONNX graph or
the user's functions run in the generator (``builders.pipeline.checks``), also before anything
is written.

Three Triton models come from a description, each in its own folder of the model repository:
``<name>_preprocess`` and ``<name>_postprocess`` (Python backend, the user's functions behind
:class:`tritonrepo.pipelines.function_step.FunctionStep`, or a :class:`PythonStep` subclass of
this repository), the core ``<name>_model`` (a TensorRT plan in ``config.pbtxt``, ONNX Runtime in
``configs/cpu.pbtxt``) and the ensemble ``<name>`` that chains them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tritonrepo.description.core_state import CoreState
from tritonrepo.description.stateful import SequenceSpec, SessionSpec
from tritonrepo_client.model_repository.config_sets import CONFIG_SETS as CONFIG_SET_TABLE
from tritonrepo_client.model_repository.dtypes import DATA_TYPES

if TYPE_CHECKING:
    from tritonrepo.description.canary import CanarySpec
    from tritonrepo.description.drift import DriftSpec

DESCRIPTION_FILE = "pipeline.toml"
DEFAULT_MAX_BATCH_SIZE = 32
NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,47}$")  # a model name and a Python identifier
REF_PATTERN = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")  # package.module:attribute

# Triton's data types a description may use (model_config.proto DataType, without TYPE_; BF16
# has no numpy type) and their numpy types: the one table,
# tritonrepo_client.model_repository.dtypes (the description reader is generator-side code,
# which reads the repository through that bottom layer; tests/layers.py).
DTYPES: Mapping[str, str] = {d.name: d.numpy_name for d in DATA_TYPES if d.has_numpy}
# The config sets a description deploys (the table of
# tritonrepo_client.model_repository.config_sets): config.pbtxt, configs/cpu.pbtxt,
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
    ``fixed_dims`` fixes dynamic non-batch dims of graph inputs (name -> dims)."""

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


@dataclass(frozen=True)
class OpenAiEmbeddings:
    """``[openai_embeddings]``: the pipeline also answers OpenAI's ``POST /v1/embeddings`` on the
    HTTP port, through the HTTP guard (``deploy/guard/openai_embeddings.js``).

    Attributes:
        input: the BYTES ``[1]`` input that takes one text.
        output: the FP32 ``[d]`` output: the text's embedding.
        tokens: an INT32/INT64 ``[1]`` output counting the text's tokens (OpenAI's ``usage``);
            None: usage is reported as 0 tokens.
    """

    input: str
    output: str
    tokens: str | None = None

    def parameter(self, dimensions: int) -> str:
        """The served configs' ``tritonrepo_openai_embeddings`` parameter (compact JSON)."""
        import json

        fields = {"input": self.input, "output": self.output, "tokens": self.tokens,
                  "dimensions": dimensions}  # fmt: skip
        return json.dumps(fields, separators=(",", ":"))


@dataclass(frozen=True)
class Pipeline:
    """A whole description (:func:`~tritonrepo.description.load`)."""

    name: str
    summary: str
    doc: str
    max_batch_size: int
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    preprocess: Step
    core: Core
    postprocess: Step
    samples: str | None
    tests: bool
    source: Path
    sequence: SequenceSpec | None = None  # [sequence]: a stateful pipeline (stateful.py)
    session: SessionSpec | None = None  # [session]: its step(state, inputs) function
    probe: Mapping[str, Any] | None = None  # [probe]: the declared health probe (KServe v2 JSON)
    core_state: CoreState | None = None  # [[sequence.state]]: state in the core (core_state.py)
    # torch_gpu set: the pipeline as one Python model on the GPU, not an ensemble
    # (builders/pipeline/render_chained.py says when it can be, and why one would)
    one_step_gpu: bool = False
    openai_embeddings: OpenAiEmbeddings | None = None  # [openai_embeddings]: /v1/embeddings
    drift: DriftSpec | None = None  # [drift]: input features counted (tritonrepo.step.drift)
    canary: CanarySpec | None = None  # [canary]: how a canary's answers are compared

    def drift_parameter(self) -> dict[str, str]:
        """``{"tritonrepo_drift": JSON}`` for the model that receives the requests, or ``{}``."""
        return self.drift.parameter(self.name) if self.drift is not None else {}

    def openai_parameter(self) -> dict[str, str]:
        """``{"tritonrepo_openai_embeddings": JSON}`` for the served configs, or ``{}``."""
        from tritonrepo_client.model_repository.roles import OPENAI_EMBEDDINGS_PARAMETER

        spec = self.openai_embeddings
        if spec is None:
            return {}
        dims = next(t.dims for t in self.outputs if t.name == spec.output)
        return {OPENAI_EMBEDDINGS_PARAMETER: spec.parameter(int(dims[-1]))}

    @property
    def stateful(self) -> bool:
        """True for a pipeline with a ``[sequence]`` table (a session model, no ensemble)."""
        return self.sequence is not None

    @property
    def folder(self) -> Path:
        """The folder of the description (its code lives there too)."""
        return self.source.parent

    @property
    def models(self) -> tuple[str, ...]:
        """The model names: ensemble, preprocess, core, postprocess; for a stateful pipeline
        the session model and the core; with state in the core, the session model alone."""
        if self.core_state is not None and self.session is not None:
            return (self.session.model,)
        if self.session is not None:
            return (self.session.model, self.core.model)
        return (self.name, self.preprocess.model, self.core.model, self.postprocess.model)

    @property
    def model_fields(self) -> tuple[str, ...]:
        """The description's field naming each of :attr:`models`."""
        if self.core_state is not None:
            return ("session.model",)
        if self.session is not None:
            return ("session.model", "model.model")
        return ("name", "preprocess.model", "model.model", "postprocess.model")
