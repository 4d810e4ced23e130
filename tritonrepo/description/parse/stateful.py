"""Reading the stateful tables of a description: ``[sequence]`` (:func:`parse_sequence`),
``[session]`` (:func:`parse_session`, :func:`session_outputs`) and what a stateful description
may not have (:func:`check_stateful_tables`). The types and the limits are
:mod:`tritonrepo.description.schema.stateful`'s; the ``[[sequence.state]]`` tables and a
hand-written session step class are read by :mod:`tritonrepo.description.parse.core_state`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tritonrepo.description.parse.reader import Reader, read_tensors
from tritonrepo.description.schema.stateful import (
    CONTROLS,
    CORRELATION_IDS,
    DEFAULT_CONTROLS,
    DEFAULT_MAX_SESSIONS,
    MAX_IDLE_TIMEOUT_S,
    TENSOR_NAME,
    SequenceSpec,
    SessionSpec,
    StateTensor,
)
from tritonrepo.description.schema.tables import REF_PATTERN, Tensor
from tritonrepo_format.config_sets import TORCH_GPU_SET

# Fields of a session step class (tritonrepo.description.parse.core_state), read there.
CORE_STATE_SEQUENCE_KEYS = ("state", "max_candidate_sequences")
CORE_STATE_SESSION_KEYS = ("step_class", "calls", "parameters", TORCH_GPU_SET)


def parse_sequence(r: Reader, raw: Any) -> SequenceSpec:
    """The ``[sequence]`` table, problems reported to ``r``."""
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


def parse_session(r: Reader, raw: Any, name: str,
                  states: tuple[StateTensor, ...] = ()) -> SessionSpec:  # fmt: skip
    """The ``[session]`` table, problems reported to ``r``; ``states``: the state the core
    returns (``[[sequence.state]]`` without a step class), which makes ``step`` optional."""
    where = "session"
    if not isinstance(raw, dict):
        r.problem(where, "is missing; add a [session] table with step = 'module:function'")
        raw = {}
    r.unknown(raw, ("step", "model", "instances", "outputs", "doc", "reference",
                    *CORE_STATE_SESSION_KEYS), where)  # fmt: skip
    step = r.get(raw, "step", where, str, "")
    if "step_class" in raw:
        pass  # a hand-written step class: tritonrepo.description.parse.core_state reads it
    elif not step and not states:
        r.problem(f"{where}.step", "is missing; give step = 'package.module:function', a "
                  "function step(state, inputs) -> (state, outputs), or, when the state comes "
                  "out of the core model, [[sequence.state]] tables")  # fmt: skip
    elif step and not REF_PATTERN.match(step):
        r.problem(f"{where}.step", f"{step!r} is not 'package.module:function'")
    reference = r.get(raw, "reference", where, str, None)
    if reference is not None and not REF_PATTERN.match(reference):
        r.problem(f"{where}.reference", f"{reference!r} is not 'package.module:function'")
    instances = r.get(raw, "instances", where, int, 1)
    if instances < 1:
        r.problem(f"{where}.instances", f"{instances}: give 1 or more")
    return SessionSpec(step, r.get(raw, "model", where, str, name), instances,
                       r.get(raw, "doc", where, str, ""), states, reference)  # fmt: skip


def check_stateful_tables(r: Reader, data: Mapping[str, Any], sequence: SequenceSpec,
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


def session_outputs(r: Reader, raw: Any) -> tuple[Tensor, ...]:
    """The ``[[session.outputs]]`` tensors (for postprocess) of the ``[session]`` table."""
    return read_tensors(r, raw.get("outputs") if isinstance(raw, dict) else None, "session.outputs")
