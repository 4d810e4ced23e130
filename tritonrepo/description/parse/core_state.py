"""Reading the state a core graph returns: the ``[[sequence.state]]`` tables
(:func:`parse_states`), and a stateful description whose CPU sets run a hand-written session
step class (``[session] step_class``: :func:`parse_core_state`). The types and the ways of
serving them: :mod:`tritonrepo.description.schema.stateful`.

Without ``step_class`` the states belong to the generated session model
(:attr:`~tritonrepo.description.schema.stateful.SessionSpec.states`). The generator proves the
graph event by event in ONNX Runtime against ``[session] reference``
(:mod:`builders.pipeline.kinds.session_proof`, :mod:`builders.pipeline.kinds.core_state_proof`).
Fields: ``docs/models/add_your_own_model.md`` ("A stateful pipeline").
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
    """The ``[[sequence.state]]`` tables, problems reported to ``r``: each a pair of graph
    tensors (the state ``output`` of an event fed back as the state ``input`` of the next),
    numeric, of fixed ``dims``, with the batch dim of the graph at ``batch_axis``."""
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
        r.unknown(table, ("input", "output", "dtype", "dims", "initial", "initial_name",
                          "batch_axis"), where)  # fmt: skip
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
        axis = r.get(table, "batch_axis", where, int, 0)
        if not 0 <= axis <= len(dims):
            r.problem(f"{where}.batch_axis", f"{axis}: give where the graph has the batch dim "
                      f"among the state's dims, 0 to {len(dims)}")  # fmt: skip
            axis = 0
        states.append(StateTensor(names[0], names[1], dtype, dims, initial, initial_name, axis))
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


def session_states(r: Reader, data: Mapping[str, Any]) -> tuple[StateTensor, ...]:
    """The ``[[sequence.state]]`` tables of a description whose generated session model feeds
    them (no ``[session] step_class``); ``()`` when it has none or a step class keeps them."""
    sequence, session = data.get("sequence"), data.get("session")
    if not isinstance(sequence, dict) or "state" not in sequence:
        return ()
    if isinstance(session, dict) and "step_class" in session:
        return ()
    if "max_candidate_sequences" in sequence:
        r.problem("sequence.max_candidate_sequences", "belongs to a session step class "
                  "(session.step_class); the session model has max_sessions x 2")  # fmt: skip
    return parse_states(r, sequence["state"])


def parse_core_state(r: Reader, data: Mapping[str, Any]) -> CoreState | None:
    """The part of a stateful description whose CPU sets run a hand-written session step class
    (``[session] step_class`` with ``[[sequence.state]]``), or None when it has none (the
    generated session model serves it: :func:`session_states`)."""
    sequence = data.get("sequence")
    session = data.get("session")
    has_class = isinstance(session, dict) and "step_class" in session
    if not isinstance(sequence, dict) or "state" not in sequence or not has_class:
        if isinstance(session, dict):
            for key in ("calls", CPU_SET, TORCH_GPU_SET, "parameters"):
                if key in session:
                    r.problem(f"session.{key}", "belongs to a session step class: add "
                              "step_class = 'module:Class' and [[sequence.state]] tables, or "
                              "drop it")  # fmt: skip
            if has_class:
                r.problem("session.step_class", "keeps the state of [[sequence.state]] tables: "
                          "add them, or drop step_class")  # fmt: skip
        return None
    states = parse_states(r, sequence["state"])
    for i, state in enumerate(states):
        if state.batch_axis:
            r.problem(f"sequence.state[{i}].batch_axis", "a builder core writes its own graph: "
                      "give its state batch first there (batch_axis = 0)")  # fmt: skip
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
    reference = session.get("reference")  # its type: parse_session
    if reference is None:
        r.problem("session.reference", "is missing; give reference = 'module:function', the "
                  "answers to a whole session, one row per event (it proves the core graph "
                  "event by event)")  # fmt: skip
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
