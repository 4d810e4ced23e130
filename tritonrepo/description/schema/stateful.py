"""The stateful tables of a description, as types: ``[sequence]`` (:class:`SequenceSpec`),
``[session]`` (:class:`SessionSpec`), the state the core model returns (``[[sequence.state]]``:
:class:`StateTensor`) and a hand-written session step class (:class:`CoreState`,
:class:`ModelCall`), with their limits.

A stateful pipeline is served by the session model ``<name>`` (Python backend,
``sequence_batching``: :class:`tritonrepo.pipelines.session_step.SessionStep`) and the core
model. Each request is one event of a session (correlation ID); the session model keeps each
session's state, runs the user's ``step(state, inputs) -> (state, outputs)`` on the event, calls
the core model through BLS with ``outputs`` and turns the core's results into the response with
the ``[postprocess]`` function, in the same model. The state lives in one of two places, or
both: in the step's own ``state`` (computed before the core runs), and in the core model's
outputs (``[[sequence.state]]`` in :attr:`SessionSpec.states`: each state ``output`` of an
event's core run is fed back as the state ``input`` of the session's next event, from the
initial state at START), as in a recurrent network.

With ``[session] step_class``, one model serves under the session's name: ``config.pbtxt`` runs
the core graph with Triton's implicit state (each ``[[sequence.state]]`` ``input`` fed from the
``output`` of the session's previous request, zeros at START); ``configs/cpu.pbtxt`` and
``configs/torch_gpu.pbtxt`` run that hand-written ``PythonStep`` subclass, which keeps the
state per correlation ID itself and may call other models through BLS.

``docs/models/add_your_own_model.md`` ("A stateful pipeline", "State in the core") describes the
fields; the limits are Triton 2.51's. Types only: :mod:`tritonrepo.description.parse.stateful`
and :mod:`tritonrepo.description.parse.core_state` read them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from tritonrepo.description.schema.tables import Deployment, Tensor

TENSOR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
CORRELATION_IDS = ("string", "uint64")
CONTROLS = ("start", "end", "ready", "corrid")
DEFAULT_CONTROLS = {"start": "START", "end": "END", "ready": "READY", "corrid": ""}
DEFAULT_MAX_SESSIONS = 10_000
MAX_IDLE_TIMEOUT_S = 7 * 24 * 3600.0  # a week: longer is a session nobody closes
# Triton keeps this many sequence slots per instance (Oldest strategy's max_candidate_sequences)
# per session the store may hold, so that a new session past max_sessions reaches the model and
# is refused with an error instead of waiting in Triton's backlog for a slot.
CANDIDATE_SEQUENCES_PER_SESSION = 2
INITIAL_STATES = ("zeros",)  # the initial state at START a [[sequence.state]] may ask for


@dataclass(frozen=True)
class SequenceSpec:
    """The ``[sequence]`` table: Triton's ``sequence_batching`` and the store's bounds.

    ``idle_timeout_s`` (s) becomes ``max_sequence_idle_microseconds``; ``controls`` maps
    ``start``/``end``/``ready``/``corrid`` to the names of the ``control_input`` tensors (``""``:
    not declared); ``correlation_id`` is the kind of ID the sessions use; ``max_sessions`` bounds
    the sessions one instance holds (new ones are refused beyond it)."""

    idle_timeout_s: float
    correlation_id: str
    max_sessions: int
    controls: Mapping[str, str]
    max_queue_delay_us: int = 0

    @property
    def idle_timeout_us(self) -> int:
        """``max_sequence_idle_microseconds``."""
        return round(self.idle_timeout_s * 1e6)

    @property
    def max_candidate_sequences(self) -> int:
        """The Oldest strategy's slots per instance (:data:`CANDIDATE_SEQUENCES_PER_SESSION`)."""
        return self.max_sessions * CANDIDATE_SEQUENCES_PER_SESSION


@dataclass(frozen=True)
class SessionSpec:
    """The ``[session]`` table: the user's ``step`` (``module:function``; ``""`` with
    :attr:`states` and no step: the request's tensors go to the core as they are), the session
    model's name (default: the pipeline's), its instances (each holds its own sessions); the
    state the core returns (``[[sequence.state]]``, empty: none) and ``reference``
    (``module:function``: ``reference(events) -> outputs``, the answers to a whole session, one
    row per event, from a stateless or the model's own streaming implementation; None: not
    given)."""

    step: str
    model: str
    instances: int
    doc: str = ""
    states: tuple[StateTensor, ...] = ()
    reference: str | None = None


@dataclass(frozen=True)
class StateTensor:
    """One ``[[sequence.state]]``: the graph's state ``input`` and ``output`` tensors (Triton's
    ``input_name``/``output_name``), their Triton ``dtype`` and ``dims`` (one session's state,
    without a batch dim), the ``initial`` state at START (``zeros``), that initial state's
    ``initial_name``, and ``batch_axis``: where the graph as given has the batch dim among
    ``dims`` (0: first; the build moves it first, as Triton and the session model need)."""

    input: str
    output: str
    dtype: str
    dims: tuple[int, ...]
    initial: str = "zeros"
    initial_name: str = "initial_state"
    batch_axis: int = 0

    @property
    def graph_shape(self) -> tuple[int | None, ...]:
        """The state's shape as the graph as given takes it: ``dims`` with the batch dim
        (None) at ``batch_axis``."""
        return (*self.dims[: self.batch_axis], None, *self.dims[self.batch_axis :])


@dataclass(frozen=True)
class ModelCall:
    """A model a step calls through BLS (``[session] calls``): its name and, when declared,
    the tensors the step sends (``input``) and reads (``output``), checked by the generator
    against the called model's config or description."""

    model: str
    inputs: tuple[Tensor, ...] = ()
    outputs: tuple[Tensor, ...] = ()


@dataclass(frozen=True)
class CoreState:
    """What a description with ``[[sequence.state]]`` adds (module docstring).

    ``step_class``: the session step of the cpu/torch_gpu sets (``module:Class``); ``calls``:
    the models it calls; ``reference``: ``module:function`` giving the answers to a whole
    session (:attr:`SessionSpec.reference`); ``deployments``: the session step's
    ``cpu``/``torch_gpu`` sets (instances, parameters, doc); ``max_candidate_sequences``:
    the Oldest strategy's slots per instance (None: ``max_sessions`` x 2)."""

    states: tuple[StateTensor, ...]
    step_class: str
    calls: tuple[ModelCall, ...]
    reference: str | None
    deployments: Mapping[str, Deployment] = field(default_factory=dict)
    max_candidate_sequences: int | None = None
