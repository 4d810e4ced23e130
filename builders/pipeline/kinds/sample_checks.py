"""The checks on a description's samples that several kinds share: the health probe made from
the samples (:func:`probe_json`), the core model's outputs on them against the shapes its graph
declares (:func:`check_core_outputs`), and a stateful description's sample sessions
(:func:`sample_sessions`). Each kind runs its samples through its own models; the problems read
like the others, each naming the field and the fix."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from builders.pipeline import batch_dims
from builders.pipeline.graph import GraphIO, graph_io
from builders.pipeline.kinds.base import compare_tensors, raised_at
from tritonrepo.description import Header, Pipeline

MIN_SAMPLE_ROWS = 8  # batch parity needs a batch; INT8 calibration and the tests use them too
PROBE_LIMIT_BYTES = 64 * 1024  # the health probe's JSON in the config, at most
MIN_SESSIONS = 2  # the generated tests of a stateful pipeline interleave two sessions at least


def quiet_session_options() -> Any:
    """``onnxruntime.SessionOptions`` that log errors only (``log_severity_level`` 3).

    ONNX Runtime's warnings (such as ``VerifyOutputSizes``: an output whose shape differs
    from the one the graph declares) would print among the generator's lines without saying
    which field to fix; :func:`check_core_outputs` reports that mismatch itself, naming the
    output and the fix, and errors still print.
    """
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    return options


def _check_declared_outputs(io: GraphIO, names: list[str], results: list[np.ndarray],
                            problems: list[str]) -> None:  # fmt: skip
    """Each output the graph produced on the samples against the shape the graph declares
    (the configs are made from the declared one): rank, and every fixed dim."""
    declared = {t.name: t.shape for t in io.outputs}
    for name, value in zip(names, results, strict=True):
        shape = declared.get(name)
        got = np.asarray(value).shape
        if shape is None or (
            len(shape) == len(got)
            and all(d is None or d == g for d, g in zip(shape, got, strict=True))
        ):
            continue
        shown = ", ".join("N" if d is None else str(d) for d in shape)
        problems.append(
            f"model: the core model's output '{name}' has shape {list(got)} on the samples, but "
            f"the graph declares [{shown}] (N = any); the configs are made from the declared "
            "shape: fix the graph's output shape (or the model)"
        )


def check_core_outputs(model: Any, feeds: Mapping[str, np.ndarray], names: list[str],
                       results: list[np.ndarray], problems: list[str],
                       who: str) -> None:  # fmt: skip
    """The core model's outputs on the samples against its declared shapes: first, an output
    whose fixed first dim the samples prove is the batch gets the graph's dynamic batch dim
    (``model``, an ``onnx.ModelProto``, is edited in place; one line on stdout names it,
    prefixed with ``who``: :mod:`builders.pipeline.batch_dims`); then every other mismatch is a
    problem. ``feeds`` are the inputs ``results`` (in ``names`` order) came from."""
    rows = batch_dims.batch_rows(feeds)
    freed = batch_dims.free_fixed_batch_dims(model, names, results, rows)
    if freed:
        print(batch_dims.note(who, freed, rows))
    _check_declared_outputs(graph_io(model), names, results, problems)


def probe_json(header: Header, samples: Mapping[str, np.ndarray]) -> str:
    """The health probe: the sample row whose request is smallest (one whose numbers are not all
    0 first: a stream's first chunk is often silence), as KServe v2 JSON input
    tensors (BYTES items as UTF-8 strings, or ``{"b64": ...}`` for binary data), every
    response tensor named (each must come back; numbers finite)."""
    rows = len(next(iter(samples.values())))

    def size(i: int) -> int:
        return sum(
            np.asarray(v[i : i + 1]).nbytes
            + sum(len(x) for x in np.ravel(v[i]) if isinstance(x, bytes))
            for v in samples.values()
        )

    def blank(i: int) -> bool:  # every number 0: a probe that shows little (silence, padding)
        values = [np.asarray(v[i]) for v in samples.values()]
        return all(v.dtype.kind in "biuf" and not np.any(v) for v in values)

    row = min(range(rows), key=lambda i: (blank(i), size(i)))
    inputs = []
    for t in header.inputs:
        if t.name not in samples:
            continue
        value = np.asarray(samples[t.name][row : row + 1])
        if header.max_batch_size == 0:  # row = one request, without a batch dim
            value = value[0]
        if t.dtype == "BYTES":
            data: list[Any] = []
            for item in value.ravel():
                raw = item if isinstance(item, bytes) else str(item).encode()
                try:
                    data.append(raw.decode("utf-8"))
                except UnicodeDecodeError:
                    data.append({"b64": base64.b64encode(raw).decode()})
        elif value.dtype.kind == "f":  # the shortest text that reads back as the same value
            data = [float(str(v)) for v in value.ravel()]
        else:
            data = value.ravel().tolist()
        inputs.append(
            {"name": t.name, "datatype": t.dtype, "shape": list(value.shape), "data": data}
        )
    outputs = [{"name": t.name} for t in header.outputs]
    return json.dumps({"inputs": inputs, "outputs": outputs}, separators=(",", ":"))


def sample_sessions(pipeline: Pipeline, make_samples: Any, problems: list[str]) -> list | None:
    """A stateful description's sample sessions, checked: a list of at least
    :data:`MIN_SESSIONS` dicts of request tensors, one row per event, :data:`MIN_SAMPLE_ROWS`
    events in all; None after a problem (appended to ``problems``)."""
    field = "samples.function"
    try:
        sessions = make_samples()
    except Exception as exc:
        problems.append(f"{field}: {pipeline.samples}() failed{raised_at(exc)}: {exc!r}")
        return None
    if not isinstance(sessions, list) or not all(isinstance(s, dict) for s in sessions):
        problems.append(
            f"{field}: a stateful pipeline's samples are sessions: return a list of "
            "{input name: array with one row per event}"
        )
        return None
    for i, events in enumerate(sessions):
        wanted = tuple(t for t in pipeline.inputs if not t.optional or t.name in events)
        where = f"{field} (session {i})"
        compare_tensors(events, wanted, where, "the request tensor", problems, "the samples")
        if len({len(np.asarray(v)) for v in events.values()}) != 1:
            problems.append(f"{field}: session {i}: give every tensor the same number of events")
    total = sum(len(np.asarray(next(iter(s.values())))) for s in sessions if s)
    if len(sessions) < MIN_SESSIONS or total < MIN_SAMPLE_ROWS:
        problems.append(
            f"{field}: returns {len(sessions)} sessions of {total} events in all; give at least "
            f"{MIN_SESSIONS} sessions and {MIN_SAMPLE_ROWS} events (the tests interleave them, "
            "the batch parity check joins them)"
        )
    return None if problems else sessions
