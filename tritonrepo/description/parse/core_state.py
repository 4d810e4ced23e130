"""Reading state in the core: a stateful description with ``[[sequence.state]]`` tables
(:func:`parse_core_state`), whose core graph keeps the session's state itself. The types and
what the two ways of serving it are: :mod:`tritonrepo.description.schema.stateful`.

The generator proves the graph event by event in ONNX Runtime against ``[session] reference``
(:mod:`builders.pipeline.kinds.core_state_proof`). Fields: ``docs/models/add_your_own_model.md``
("State in the core").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tritonrepo.description.parse.reader import Reader, read_deployments, read_tensors
from tritonrepo.description.schema.stateful import (
    INITIAL_STATES,
    CoreState,
    ModelCall,
    StateTensor,
)
from tritonrepo.description.schema.tables import (
    DTYPES,
    NAME_PATTERN,
    REF_PATTERN,
    Deployment,
)
from tritonrepo_format.config_sets import CPU_SET, TORCH_GPU_SET


def parse_states(r: Reader, raw: Any) -> tuple[StateTensor, ...]:
    """The ``[[sequence.state]]`` tables, problems reported to ``r``."""
    if not isinstance(raw, list) or not raw:
        r.problem("sequence.state", "must be a list of tables ([[sequence.state]])")
        return ()
    states = []
    seen: set[str] = set()  # state tensor names so far: Triton pairs them by name
    for i, table in enumerate(raw):
        where = f"sequence.state[{i}]"
        if not isinstance(table, dict):
            r.problem(where, "must be a table with input, output, dtype and dims")
            continue
        r.unknown(table, ("input", "output", "dtype", "dims", "initial", "initial_name"), where)
        names = [r.get(table, k, where, str, "") for k in ("input", "output")]
        for key, name in zip(("input", "output"), names, strict=True):
            if not name:
                r.problem(f"{where}.{key}", f"is missing; give the graph's state {key} tensor")
        if names[0] and names[0] == names[1]:
            r.problem(where, "input and output must differ (Triton pairs them by name)")
        for key, name in zip(("input", "output"), names, strict=True):
            if name and name in seen:
                r.problem(f"{where}.{key}", f"'{name}' is already a state tensor; give each once")
            seen.add(name)
        dtype = r.get(table, "dtype", where, str, "")
        if dtype not in DTYPES or dtype == "BYTES":
            r.problem(f"{where}.dtype", f"{dtype!r}: give a numeric Triton data type")
        dims = r.get(table, "dims", where, list, [])
        if not dims or any(not isinstance(d, int) or isinstance(d, bool) or d < 1 for d in dims):
            r.problem(f"{where}.dims", f"{dims!r}: give fixed sizes >= 1 (the state's shape)")
        initial = r.get(table, "initial", where, str, "zeros")
        if initial not in INITIAL_STATES:
            r.problem(f"{where}.initial", f"{initial!r}: give one of {', '.join(INITIAL_STATES)}")
        initial_name = r.get(table, "initial_name", where, str, "initial_state")
        dims = tuple(d for d in dims if isinstance(d, int))
        states.append(StateTensor(names[0], names[1], dtype, dims, initial, initial_name))
    return tuple(states)


def parse_calls(r: Reader, raw: Any, where: str) -> tuple[ModelCall, ...]:
    """``calls``: model names, or tables ``{ model, input, output }`` declaring the tensors."""
    if not isinstance(raw, list):
        r.problem(where, "must be a list of model names or { model, input, output } tables")
        return ()
    calls = []
    for i, item in enumerate(raw):
        at = f"{where}[{i}]"
        table = {"model": item} if isinstance(item, str) else item
        if not isinstance(table, dict):
            r.problem(at, f"{item!r}: give a model name or a table {{ model = 'name', ... }}")
            continue
        r.unknown(table, ("model", "input", "output"), at)
        model = r.get(table, "model", at, str, "")
        if not NAME_PATTERN.match(model):
            r.problem(f"{at}.model", f"{model!r} is not a model name (lower-case, digits, _)")
        elif model in (c.model for c in calls):
            r.problem(at, f"'{model}' is listed twice; give each model once")
        calls.append(ModelCall(model, read_tensors(r, table.get("input"), f"{at}.input"),
                               read_tensors(r, table.get("output"), f"{at}.output")))  # fmt: skip
    return tuple(calls)


def parse_core_state(r: Reader, data: Mapping[str, Any]) -> CoreState | None:
    """The core-state part of a stateful description, or None when it has no
    ``[[sequence.state]]`` (state in a step)."""
    sequence = data.get("sequence")
    session = data.get("session")
    if not isinstance(sequence, dict) or "state" not in sequence:
        if isinstance(session, dict):
            for key in ("step_class", "reference", "calls", CPU_SET, TORCH_GPU_SET, "parameters"):
                if key in session:
                    r.problem(f"session.{key}", "belongs to state in the core: add "
                              "[[sequence.state]] tables, or drop it")  # fmt: skip
        return None
    states = parse_states(r, sequence["state"])
    session = session if isinstance(session, dict) else {}
    step_class = r.get(session, "step_class", "session", str, "")
    if not step_class:
        r.problem("session.step_class", "is missing; state in the core serves the cpu and "
                  "torch_gpu sets with a PythonStep class that keeps the state: give "
                  "step_class = 'package.module:Class'")  # fmt: skip
    elif not REF_PATTERN.match(step_class):
        r.problem("session.step_class", f"{step_class!r} is not 'package.module:Class'")
    if "step" in session:
        r.problem("session.step", "state in the core runs session.step_class; drop step")
    reference = r.get(session, "reference", "session", str, None)
    if reference is not None and not REF_PATTERN.match(reference):
        r.problem("session.reference", f"{reference!r} is not 'package.module:function'")
    if reference is None:
        r.problem("session.reference", "is missing; give reference = 'module:function', the "
                  "stateless answer to a session's last event (it proves the core graph event "
                  "by event)")  # fmt: skip
    calls = parse_calls(r, session.get("calls", []), "session.calls")
    own = {k: session[k] for k in ("instances", "parameters", "doc") if k in session}
    if TORCH_GPU_SET in session:
        own[TORCH_GPU_SET] = session[TORCH_GPU_SET]
    sets = read_deployments(r, own, "session", {"default": Deployment()})
    cpu = sets.pop("default")  # the session's own fields: configs/cpu.pbtxt
    sets = {CPU_SET: cpu, TORCH_GPU_SET: sets.get(TORCH_GPU_SET, cpu)}
    candidates = r.get(sequence, "max_candidate_sequences", "sequence", int, None)
    if candidates is not None and candidates < 1:
        r.problem("sequence.max_candidate_sequences", f"{candidates}: give 1 or more")
    model = data.get("model")
    if isinstance(model, dict):
        for key in (CPU_SET, TORCH_GPU_SET, "int8", "model"):
            if key in model:
                r.problem(f"model.{key}", "with state in the core, [model] is config.pbtxt's "
                          "graph under the session's name; the cpu and torch_gpu sets run "
                          "session.step_class: drop it")  # fmt: skip
    return CoreState(states, step_class, calls, reference, sets, candidates)
