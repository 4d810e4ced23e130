"""Reading the optional tables of a single-core description, each checked against the
pipeline: ``[openai_embeddings]`` (:func:`parse_openai`), ``[canary]`` (:func:`parse_canary`)
and ``[drift]`` (:func:`parse_drift`). The types and their shape:
:mod:`tritonrepo.description.schema.options`."""

from __future__ import annotations

from typing import Any

from tritonrepo.description.parse.reader import Reader
from tritonrepo.description.schema.options import (
    DEFAULT_BINS,
    MAX_BINS,
    MEASURES,
    MIN_BINS,
    CanarySpec,
    DriftSpec,
    OpenAiEmbeddings,
)
from tritonrepo.description.schema.single_core import Pipeline
from tritonrepo.description.schema.tables import REF_PATTERN


def parse_openai(r: Reader, raw: Any, pipeline: Pipeline) -> OpenAiEmbeddings | None:
    """``[openai_embeddings]``: names the pipeline's text input, embedding output and token
    count output, each checked against the description's tensors."""
    where = "openai_embeddings"
    raw = r.table(raw, where, ("input", "output", "tokens"),
                  "input = 'TEXT', output = 'EMBEDDING', tokens = ...")  # fmt: skip
    if raw is None:
        return None
    spec = OpenAiEmbeddings(
        input=r.get(raw, "input", where, str, ""),
        output=r.get(raw, "output", where, str, ""),
        tokens=r.get(raw, "tokens", where, str, None),
    )
    inputs = {t.name: t for t in pipeline.inputs}
    outputs = {t.name: t for t in pipeline.outputs}
    wanted = (
        ("input", spec.input, inputs, ("BYTES",), "a BYTES [1] input (one text)"),
        ("output", spec.output, outputs, ("FP32",), "an FP32 [d] output (the embedding)"),
        ("tokens", spec.tokens, outputs, ("INT32", "INT64"), "an INT32 or INT64 [1] output"),
    )
    for key, name, tensors, dtypes, what in wanted:
        if name is None:
            continue
        tensor = tensors.get(name)
        shape_ok = tensor is not None and (
            len(tensor.dims) == 1 and tensor.dims[0] > 0 if key == "output" else tensor.dims == (1,)
        )
        if tensor is None or tensor.dtype not in dtypes or not shape_ok:
            r.problem(f"{where}.{key}", f"{name!r} must name {what} of the pipeline")
    if pipeline.stateful or pipeline.max_batch_size < 1:
        r.problem(where, "needs a stateless pipeline with max_batch_size >= 1 (texts are batched)")
    return spec


def parse_canary(r: Reader, raw: Any, outputs: list[str]) -> CanarySpec | None:
    """``[canary]`` checked against the pipeline's outputs."""
    where = "canary"
    raw = r.table(raw, where, ("output", "measure", "min"),
                  "output = 'EMBEDDING', measure = 'cosine', min = 0.99")  # fmt: skip
    if raw is None:
        return None
    output = r.get(raw, "output", where, str, "")
    measure = r.get(raw, "measure", where, str, "cosine")
    low = r.get(raw, "min", where, float, 0.0)
    if output not in outputs:
        r.problem(f"{where}.output", f"{output!r} is not a response tensor: {outputs}")
    if measure not in MEASURES:
        r.problem(f"{where}.measure", f"{measure!r}: give one of {', '.join(MEASURES)}")
    if not 0.0 <= low <= 1.0:
        r.problem(f"{where}.min", f"{low}: an agreement is 0 to 1")
    return CanarySpec(output, measure, low)


def parse_drift(r: Reader, raw: Any, samples: str | None, stateful: bool) -> DriftSpec | None:
    """``[drift]`` checked: references well-formed, ``bins`` in range, a reference to profile
    (``reference`` or ``[samples]``), and a stateless pipeline."""
    where = "drift"
    raw = r.table(raw, where, ("features", "reference", "bins"),
                  "features = 'module:function', reference = ...")  # fmt: skip
    if raw is None:
        return None
    spec = DriftSpec(
        features=r.get(raw, "features", where, str, None),
        reference=r.get(raw, "reference", where, str, None),
        bins=r.get(raw, "bins", where, int, DEFAULT_BINS),
    )
    for key in ("features", "reference"):
        ref = getattr(spec, key)
        if ref is not None and not REF_PATTERN.match(ref):
            r.problem(f"{where}.{key}", f"{ref!r} is not 'package.module:function'")
    if not MIN_BINS <= spec.bins <= MAX_BINS:
        r.problem(f"{where}.bins", f"{spec.bins}: give {MIN_BINS} to {MAX_BINS}")
    if spec.reference is None and samples is None:
        r.problem(f"{where}.reference", "is missing and there are no [samples] to profile; "
                  "give reference = 'module:function' (your training data)")  # fmt: skip
    if stateful:
        r.problem(where, "is for stateless pipelines (a session's events are not counted yet)")
    return spec
