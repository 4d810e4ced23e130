"""The stateful part of a description: its ``[sequence]`` and ``[session]`` tables.

A stateful pipeline is served by two models: the session model ``<name>`` (Python backend,
``sequence_batching``: :class:`tritonrepo.pipelines.session_step.SessionStep`) and the core
model. Each request is one event of a session (correlation ID); the session model keeps each
session's state, runs the user's ``step(state, inputs) -> (state, outputs)`` on the event, calls
the core model through BLS with ``outputs`` and turns the core's results into the response with
the ``[postprocess]`` function, in the same model. ``docs/models/add_your_own_model.md``
("A stateful pipeline") describes the fields; the limits checked here are Triton 2.51's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

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
# Fields of state in the core (tritonrepo.description.core_state), read there.
CORE_STATE_SEQUENCE_KEYS = ("state", "max_candidate_sequences")
CORE_STATE_SESSION_KEYS = ("step_class", "reference", "calls", "parameters", "torch_gpu")


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
    """The ``[session]`` table: the user's ``step`` (``module:function``), the session model's
    name (default: the pipeline's), its instances (each holds its own sessions)."""

    step: str
    model: str
    instances: int
    doc: str = ""


def parse_sequence(r: Any, raw: Any) -> SequenceSpec:
    """The ``[sequence]`` table, problems reported to ``r`` (a
    ``tritonrepo.description.reader._Reader``)."""
    where = "sequence"
    if not isinstance(raw, dict):
        r.problem(where, "must be a table ([sequence] idle_timeout_s = ...)")
        raw = {}
    r.unknown(raw, ("idle_timeout_s", "correlation_id", "max_sessions", "max_queue_delay_us",
                    "controls", "doc", *CORE_STATE_SEQUENCE_KEYS), where)  # fmt: skip
    idle = raw.get("idle_timeout_s")
    if idle is None:
        r.problem(
            f"{where}.idle_timeout_s",
            "is missing; give the seconds a session may stay idle before it is dropped "
            "(Triton's own default, 1 s, ends human-paced sessions between two clicks)",
        )
        idle = 1.0
    elif isinstance(idle, bool) or not isinstance(idle, (int, float)):
        r.problem(f"{where}.idle_timeout_s", f"must be a number of seconds, got {idle!r}")
        idle = 1.0
    elif not 1e-3 <= idle <= MAX_IDLE_TIMEOUT_S:
        r.problem(
            f"{where}.idle_timeout_s",
            f"{idle!r}: give 0.001 to {MAX_IDLE_TIMEOUT_S:g} s (Triton counts whole µs; "
            "a session idle longer is one nobody closes)",
        )
    kind = r.get(raw, "correlation_id", where, str, "string")
    if kind not in CORRELATION_IDS:
        r.problem(
            f"{where}.correlation_id",
            f"{kind!r}: give 'string' (IDs of 1 to 128 bytes: Triton 2.51 refuses longer ones "
            "with UNIMPLEMENTED) or 'uint64' (1 to 2**64-1: 0 means 'no sequence' and is refused; "
            "gRPC clients reach 2**63-1)",
        )
    max_sessions = r.get(raw, "max_sessions", where, int, DEFAULT_MAX_SESSIONS)
    if max_sessions < 1:
        r.problem(f"{where}.max_sessions", f"{max_sessions}: give 1 or more")
    delay = r.get(raw, "max_queue_delay_us", where, int, 0)
    if delay < 0:
        r.problem(f"{where}.max_queue_delay_us", f"{delay}: give 0 or more µs")
    controls = dict(DEFAULT_CONTROLS)
    table = r.get(raw, "controls", where, dict, {})
    r.unknown(table, CONTROLS, f"{where}.controls")
    for key in CONTROLS:
        value = r.get(table, key, f"{where}.controls", str, controls[key])
        if value and not TENSOR_NAME.match(value):
            r.problem(f"{where}.controls.{key}", f"{value!r} is not a tensor name")
        controls[key] = value
    for key in ("start", "end"):
        if not controls[key]:
            r.problem(
                f"{where}.controls.{key}",
                "is empty; the session model reads START and END to create and drop state",
            )
    if controls["corrid"] and kind == "string":
        r.problem(
            f"{where}.controls.corrid",
            "a CORRID control breaks string correlation IDs on Triton 2.51 (as UINT64 it "
            "overflowed and aborted the server; as STRING it refuses every request): drop it "
            "(the session model keys state by the request's own ID) or use correlation_id = "
            "'uint64'",
        )
    names = [v for v in controls.values() if v]
    if len(set(names)) != len(names):
        r.problem(f"{where}.controls", f"the control tensors' names must differ: {names}")
    return SequenceSpec(float(idle), kind, max_sessions, controls, delay)


def parse_session(r: Any, raw: Any, name: str, ref_pattern: re.Pattern[str]) -> SessionSpec:
    """The ``[session]`` table, problems reported to ``r``."""
    where = "session"
    if not isinstance(raw, dict):
        r.problem(where, "is missing; add a [session] table with step = 'module:function'")
        raw = {}
    r.unknown(raw, ("step", "model", "instances", "outputs", "doc", *CORE_STATE_SESSION_KEYS),
              where)  # fmt: skip
    step = r.get(raw, "step", where, str, "")
    if "step_class" in raw:
        pass  # state in the core: tritonrepo.description.core_state reads it
    elif not step:
        r.problem(f"{where}.step", "is missing; give step = 'package.module:function', a "
                  "function step(state, inputs) -> (state, outputs)")  # fmt: skip
    elif not ref_pattern.match(step):
        r.problem(f"{where}.step", f"{step!r} is not 'package.module:function'")
    instances = r.get(raw, "instances", where, int, 1)
    if instances < 1:
        r.problem(f"{where}.instances", f"{instances}: give 1 or more")
    return SessionSpec(step, r.get(raw, "model", where, str, name), instances,
                       r.get(raw, "doc", where, str, ""))  # fmt: skip


def check_stateful_tables(r: Any, data: Mapping[str, Any], sequence: SequenceSpec,
                          input_names: list[str]) -> None:  # fmt: skip
    """What a stateful description may not have, and control names clashing with inputs."""
    if "preprocess" in data:
        r.problem(
            "preprocess",
            "a stateful pipeline has no preprocess model: its [session] step does that work "
            "(step(state, inputs) -> (state, outputs for the core model)); move it there",
        )
    post = data.get("postprocess")
    if isinstance(post, dict):
        for key in post:
            if key not in ("function", "doc"):
                r.problem(
                    f"postprocess.{key}",
                    "a stateful pipeline runs its postprocess function inside the session "
                    "model: give only function = 'module:function' (and doc)",
                )
    core = data.get("model")
    if isinstance(core, dict) and core.get("int8"):
        r.problem("model.int8", "is not built for a stateful pipeline; drop it")
    for key, control in sequence.controls.items():
        if control in input_names:
            r.problem(f"sequence.controls.{key}", f"'{control}' is also a request input; rename "
                      "one of them")  # fmt: skip


def session_outputs(raw: Any, tensors: Callable[..., Any], r: Any) -> Any:
    """The ``[[session.outputs]]`` tensors (for postprocess), through ``tensors``."""
    return tensors(r, raw.get("outputs") if isinstance(raw, dict) else None, "session.outputs")
