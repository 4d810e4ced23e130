"""A core model's output whose first dim the graph fixes while the samples show it is the batch,
made dynamic (:func:`free_fixed_batch_dims`), by the generator's checks and by the build.

Converters declare some outputs with a fixed first dim although the model returns one row per
input row: onnxmltools' ``convert_lightgbm(..., zipmap=False)`` declares the ``label`` output
``[1]`` whatever the batch, and ONNX Runtime returns ``[n]``. The served configs do not depend
on that dim (they leave the batch dim out), but a graph that declares it fixed is refused by the
shape check (:func:`builders.pipeline.kinds.sample_checks.check_core_outputs`), and ONNX Runtime
warns at every batch (``VerifyOutputSizes``). So where the samples prove the dim is the batch,
it is replaced by the graph's batch dim and the caller prints one line (:func:`note`).

"The samples prove it" means, for one output: the graph declares the same rank as the output
has on the samples, a fixed first dim (``dim_value`` > 0) that is not the samples' batch, every
other fixed dim equal to the computed one, and a first dim on the samples equal to the batch of
the core model's inputs (every input's first dim; see :func:`batch_rows`). Anything else is
left for the shape check to report.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

Shape = tuple[int | None, ...]  # a declared shape: a fixed size, or None for a dynamic dim


def batch_rows(feeds: Mapping[str, np.ndarray]) -> int | None:
    """The batch of the core model's inputs: the first dim every one of ``feeds`` shares (each
    array batch-first, any dtype); None without feeds, when a feed has no dim, or when their
    first dims differ."""
    firsts = {np.asarray(v).shape[0] if np.asarray(v).ndim else None for v in feeds.values()}
    if len(firsts) != 1 or None in firsts:
        return None
    return firsts.pop()


def _declared(value: Any) -> Shape:
    """The declared shape of a graph ``ValueInfoProto``: ``None`` for a symbolic or unset dim."""
    return tuple(
        d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
        for d in value.type.tensor_type.shape.dim
    )


def _batch_param(model: Any) -> str:
    """The symbolic name of the graph inputs' batch dim (``dim_param`` of every input's first
    dim, when they all share one), else '' (the replaced dim is then left unnamed: dynamic)."""
    initializers = {i.name for i in model.graph.initializer}
    params = set()
    for value in model.graph.input:
        if value.name in initializers:
            continue
        dims = value.type.tensor_type.shape.dim
        params.add(dims[0].dim_param if len(dims) and dims[0].HasField("dim_param") else "")
    return params.pop() if len(params) == 1 else ""


def fixed_batch_outputs(
    model: Any, names: Sequence[str], results: Sequence[np.ndarray], rows: int | None
) -> dict[str, Shape]:
    """The outputs whose declared fixed first dim the samples prove is the batch (module
    docstring), ``{name: declared shape}`` in graph order; nothing is changed.

    Args:
        model: the ``onnx.ModelProto``.
        names: the output names ``results`` are in the order of.
        results: the outputs ONNX Runtime computed on the samples' feeds.
        rows: the batch of those feeds (:func:`batch_rows`); None proves nothing.
    """
    if rows is None:
        return {}
    computed = {n: np.asarray(r).shape for n, r in zip(names, results, strict=True)}
    found: dict[str, Shape] = {}
    for value in model.graph.output:
        got = computed.get(value.name)
        if value.type.WhichOneof("value") != "tensor_type" or got is None:
            continue
        if not value.type.tensor_type.HasField("shape"):
            continue  # no shape declared: nothing fixed
        shape = _declared(value)
        if (
            len(shape) == len(got) >= 1
            and shape[0] is not None
            and shape[0] != rows
            and got[0] == rows
            and all(d is None or d == g for d, g in zip(shape[1:], got[1:], strict=True))
        ):
            found[value.name] = shape
    return found


def free_fixed_batch_dims(
    model: Any, names: Sequence[str], results: Sequence[np.ndarray], rows: int | None
) -> dict[str, Shape]:
    """Make the first dim of each of :func:`fixed_batch_outputs` the graph's batch dim, in
    ``model`` (edited in place: the inputs' ``dim_param`` when they share one, else an unnamed
    dynamic dim); returns ``{name: the shape declared before}`` (empty: nothing changed)."""
    found = fixed_batch_outputs(model, names, results, rows)
    param = _batch_param(model)
    for value in model.graph.output:
        if value.name in found:
            dim = value.type.tensor_type.shape.dim[0]
            dim.Clear()
            if param:
                dim.dim_param = param
    return found


def free_on_feeds(model: Any, feeds: Mapping[str, np.ndarray]) -> dict[str, Shape]:
    """:func:`free_fixed_batch_dims` with the outputs ONNX Runtime (CPU, errors-only log)
    computes for ``feeds`` (the core model's inputs for the samples, batch-first).

    Raises:
        whatever ONNX Runtime raises for the model or the feeds.
    """
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3  # the declared-size warnings are what is fixed here
    session = ort.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    names = [o.name for o in session.get_outputs()]
    results = session.run(names, dict(feeds))
    return free_fixed_batch_dims(model, names, results, batch_rows(feeds))


def _shown(shape: Shape) -> str:
    return "[" + ", ".join("N" if d is None else str(d) for d in shape) + "]"


def note(who: str, freed: Mapping[str, Sequence[int | None]], rows: int | None) -> str:
    """The one line that says what :func:`free_fixed_batch_dims` changed, e.g. ``click: model:
    output 'label' (declared [1]) has one row per sample (16 rows for a batch of 16): its first
    dim is now the dynamic batch dim``."""
    parts = ", ".join(f"'{name}' (declared {_shown(tuple(s))})" for name, s in freed.items())
    several = len(freed) > 1
    return (
        f"{who}: output{'s' if several else ''} {parts} {'have' if several else 'has'} one row "
        f"per sample ({rows} rows for a batch of {rows}): {'their' if several else 'its'} first "
        "dim is now the dynamic batch dim"
    )
