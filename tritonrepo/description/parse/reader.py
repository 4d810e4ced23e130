"""Reading a description's TOML: :class:`Reader` (typed fields, every problem collected) and
the readers of the tables every description shape shares: tensors (``[[input]]``,
``[[output]]``, a step's ``outputs``: :func:`read_tensors`), config sets (a model table's own
fields and its ``cpu`` / ``torch_gpu`` sub-tables, each a
:class:`~tritonrepo.description.schema.Deployment`: :func:`read_deployments`), ``[probe]``
(:func:`read_probe`) and a ``module:function`` table such as ``[samples]``
(:func:`read_function_table`)."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from tritonrepo.description.schema.tables import DTYPES, REF_PATTERN, Deployment, Tensor
from tritonrepo_format.config_sets import CPU_SET, TORCH_GPU_SET


class Reader:
    """Reads typed fields from the parsed TOML, collecting every problem."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def problem(self, where: str, message: str) -> None:
        """Record ``<where>: <message>`` (``where``: the field, dotted)."""
        self.problems.append(f"{where}: {message}")

    def get(self, table: Mapping[str, Any], key: str, where: str, kind: type, default: Any) -> Any:
        """``table[key]`` when it is a ``kind``, else ``default`` (the problem recorded when
        the key is there with another type; a bool is not an int)."""
        if key not in table:
            return default
        value = table[key]
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        if not ok:
            self.problem(
                f"{where}.{key}" if where else key, f"must be {_KIND[kind]}, got {value!r}"
            )
            return default
        return value

    def table(
        self, raw: Any, where: str, known: Sequence[str], example: str
    ) -> Mapping[str, Any] | None:
        """``raw`` when it is a table (its unknown keys reported), else None with the problem
        "must be a table: ``example``"."""
        if not isinstance(raw, dict):
            self.problem(where, f"must be a table: {example}")
            return None
        self.unknown(raw, known, where)
        return raw

    def unknown(self, table: Mapping[str, Any], known: Sequence[str], where: str) -> None:
        """Record each key of ``table`` not in ``known``, with the closest known one."""
        known = list(dict.fromkeys(known))
        for key in table:
            if key not in known:
                hint = _closest(key, known)
                self.problem(
                    f"{where}.{key}" if where else key,
                    f"unknown field{hint}; known: {', '.join(known)}",
                )


_KIND = {
    str: "a string",
    int: "an integer",
    float: "a number with a decimal point (0.99, 1.0)",
    bool: "true or false",
    list: "a list",
    dict: "a table",
}


def _closest(key: str, known: Sequence[str]) -> str:
    match = difflib.get_close_matches(key, known, n=1)
    return f" (did you mean '{match[0]}'?)" if match else ""


def _tensor(r: Reader, raw: Any, where: str) -> Tensor | None:
    if not isinstance(raw, dict):
        r.problem(where, f"must be a table with name, dtype and dims, got {raw!r}")
        return None
    r.unknown(raw, ("name", "dtype", "dims", "optional", "doc", "label_filename"), where)
    name = r.get(raw, "name", where, str, "")
    dtype = r.get(raw, "dtype", where, str, "")
    dims = r.get(raw, "dims", where, list, None)
    if not name:
        r.problem(f"{where}.name", "is missing; give the tensor's name")
    if not dtype and "dtype" not in raw:
        r.problem(f"{where}.dtype", f"is missing; give one of {', '.join(DTYPES)}")
    elif dtype not in DTYPES:
        r.problem(
            f"{where}.dtype", f"{dtype!r} is not a Triton data type; one of {', '.join(DTYPES)}"
        )
    if dims is None:
        r.problem(f"{where}.dims", "is missing; give the dims without the batch dim, e.g. [3]")
        dims = []
    elif not dims or any(
        not isinstance(d, int) or isinstance(d, bool) or d == 0 or d < -1 for d in dims
    ):
        r.problem(f"{where}.dims", f"{dims!r}: give a non-empty list of sizes > 0 or -1 (any)")
    return Tensor(
        name,
        dtype,
        tuple(int(d) for d in dims if isinstance(d, int)),
        r.get(raw, "optional", where, bool, False),
        r.get(raw, "doc", where, str, ""),
        r.get(raw, "label_filename", where, str, None),
    )


def read_tensors(r: Reader, raw: Any, where: str) -> tuple[Tensor, ...]:
    """The tensor tables of ``raw`` (a list, or None: none), each checked, each name once."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        r.problem(where, "must be a list of tensor tables ([[input]] / [[output]])")
        return ()
    tensors = [t for i, item in enumerate(raw) if (t := _tensor(r, item, f"{where}[{i}]"))]
    seen: set[str] = set()
    for t in tensors:
        if t.name in seen:
            r.problem(where, f"tensor '{t.name}' is declared twice; give each tensor once")
        seen.add(t.name)
    return tuple(tensors)


DEPLOYMENT_KEYS = (
    "instances",
    "max_queue_delay_us",
    "preferred_batch_sizes",
    "max_batch_size",
    "parameters",
    "doc",
    "ragged_inputs",
    "priority_levels",
)
# The values of ``priority_levels``: none (Triton's plain queue) or real-time and bulk
# (tritonrepo.server.queue_policy: REALTIME, BULK).
PRIORITY_LEVELS = (0, 2)


def _deployment(r: Reader, raw: Mapping[str, Any], where: str, base: Deployment) -> Deployment:
    r.unknown(raw, DEPLOYMENT_KEYS, where)
    instances = r.get(raw, "instances", where, int, base.instances)
    delay = r.get(raw, "max_queue_delay_us", where, int, base.max_queue_delay_us)
    preferred = r.get(raw, "preferred_batch_sizes", where, list, list(base.preferred_batch_sizes))
    max_batch = r.get(raw, "max_batch_size", where, int, base.max_batch_size)
    parameters = r.get(raw, "parameters", where, dict, dict(base.parameters))
    ragged = r.get(raw, "ragged_inputs", where, list, list(base.ragged_inputs))
    names = [n for n in ragged if isinstance(n, str) and n]
    if len(names) != len(ragged) or len(set(names)) != len(names):
        r.problem(f"{where}.ragged_inputs", f"{ragged!r}: give input names, each once")
    if instances < 1:
        r.problem(f"{where}.instances", f"{instances}: give 1 or more")
    if delay < 0:
        r.problem(f"{where}.max_queue_delay_us", f"{delay}: give 0 or more µs")
    if any(not isinstance(p, int) or p < 1 for p in preferred):
        r.problem(f"{where}.preferred_batch_sizes", f"{preferred!r}: give sizes >= 1")
    bad = [k for k, v in parameters.items() if not isinstance(v, str)]
    if bad:
        r.problem(f"{where}.parameters", f"values of {bad} must be strings (Triton parameters)")
    levels = r.get(raw, "priority_levels", where, int, base.priority_levels)
    if levels not in PRIORITY_LEVELS:
        r.problem(
            f"{where}.priority_levels",
            f"{levels}: give 2 (real-time and bulk, bounded queues with timeouts) or 0 (Triton's "
            "plain queue, the default)",
        )
    return Deployment(
        instances,
        delay,
        tuple(p for p in preferred if isinstance(p, int)),
        max_batch,
        {k: str(v) for k, v in parameters.items()},
        r.get(raw, "doc", where, str, base.doc),
        tuple(names),
        levels if levels in PRIORITY_LEVELS else 0,
    )


def read_deployments(
    r: Reader, raw: Mapping[str, Any], where: str, defaults: Mapping[str, Deployment]
) -> dict[str, Deployment]:
    """``default`` (config.pbtxt) from the table's own fields, ``cpu``/``torch_gpu`` from
    sub-tables over it (``defaults`` per set: ``torch_gpu`` only exists when the description has
    that table or a default for it)."""
    own = {k: raw[k] for k in DEPLOYMENT_KEYS if k in raw}
    default = _deployment(r, own, f"{where}", defaults["default"])
    out = {"default": default}
    for name in (CPU_SET, TORCH_GPU_SET):
        if name in raw:
            table = raw[name]
            if not isinstance(table, dict):
                r.problem(f"{where}.{name}", "must be a table")
                continue
            base = defaults.get(name, replace(default, doc=""))
            out[name] = _deployment(r, table, f"{where}.{name}", base)
        elif name in defaults:
            out[name] = defaults[name]
    return out


def read_probe(r: Reader, raw: Any) -> Mapping[str, Any] | None:
    """The ``[probe]`` table: ``inputs`` (KServe v2 JSON input tensors) and optional
    ``outputs``; its format and its tensors are checked by the generator
    (``builders.pipeline.kinds.declared``), which writes it as the ``tritonrepo_probe``
    parameter."""
    if not isinstance(raw, dict):
        r.problem("probe", "must be a table with inputs = [{ name, datatype, shape, data }]")
        return None
    r.unknown(raw, ("inputs", "outputs"), "probe")
    if not r.get(raw, "inputs", "probe", list, []):
        r.problem("probe.inputs", "is missing or empty; give the request's tensors")
    r.get(raw, "outputs", "probe", list, [])
    return dict(raw)


def read_function_table(r: Reader, data: Mapping[str, Any], key: str) -> str | None:
    """The ``function = 'module:function'`` of table ``key`` (``[samples]``), or None when the
    description has no such table."""
    if key not in data:
        return None
    table = data[key]
    if not isinstance(table, dict):
        r.problem(key, "must be a table with function = 'module:function'")
        return None
    r.unknown(table, ("function",), key)
    ref = r.get(table, "function", key, str, None)
    if ref is not None and not REF_PATTERN.match(ref):
        r.problem(f"{key}.function", f"{ref!r} is not 'package.module:function'")
    return ref
