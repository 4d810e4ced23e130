"""Reading a description file: :func:`parse` (parsed TOML to :class:`Pipeline`), :func:`load`
(a ``pipeline.toml``, single-core or graph), :func:`import_ref` (what a ``module:attribute``
reference names) and :func:`discover` (the descriptions under a folder)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from tritonrepo.description.canary import parse_canary
from tritonrepo.description.core_state import parse_core_state
from tritonrepo.description.drift import parse_drift
from tritonrepo.description.graph import is_graph, parse_graph
from tritonrepo.description.model_tables import _core, _step
from tritonrepo.description.reader import _deployments, _probe, _Reader, _tensors
from tritonrepo.description.schema import (
    DEFAULT_MAX_BATCH_SIZE,
    DESCRIPTION_FILE,
    DTYPES,
    NAME_PATTERN,
    REF_PATTERN,
    DescriptionError,
    OpenAiEmbeddings,
    Pipeline,
    Step,
)
from tritonrepo.description.stateful import (
    check_stateful_tables,
    parse_sequence,
    parse_session,
    session_outputs,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

_TOP_KEYS = (
    "name",
    "summary",
    "doc",
    "max_batch_size",
    "input",
    "output",
    "preprocess",
    "model",
    "postprocess",
    "samples",
    "tests",
    "sequence",
    "session",
    "probe",
    "one_step_gpu",
    "openai_embeddings",
    "drift",
    "canary",
)


def parse(data: Mapping[str, Any], source: Path) -> Pipeline:
    """A :class:`Pipeline` from parsed TOML ``data`` (``source``: the file, for messages and
    :attr:`Pipeline.folder`).

    Raises:
        DescriptionError: every structural problem, each naming its field and the fix.
    """
    r = _Reader()
    r.unknown(data, _TOP_KEYS, "")
    name = r.get(data, "name", "", str, "")
    if not NAME_PATTERN.match(name):
        r.problem(
            "name", f"{name!r}: give a lower-case name of letters, digits and _ (a model name)"
        )
    max_batch = r.get(data, "max_batch_size", "", int, DEFAULT_MAX_BATCH_SIZE)
    if max_batch < 0:
        r.problem("max_batch_size", f"{max_batch}: give 1 or more (0: one request = one item, "
                  "no batch dim)")  # fmt: skip
    sequence = session = core_state = None
    if "sequence" in data:
        sequence = parse_sequence(r, data["sequence"])
        session = parse_session(r, data.get("session"), name, REF_PATTERN)
        core_state = parse_core_state(r, data, DTYPES, _tensors, _deployments, NAME_PATTERN,
                                      REF_PATTERN)  # fmt: skip
    elif "session" in data:
        r.problem("session", "needs a [sequence] table (a stateful pipeline); add one or drop it")
    samples = None
    if "samples" in data:
        table = data["samples"]
        if isinstance(table, dict):
            r.unknown(table, ("function",), "samples")
            samples = r.get(table, "function", "samples", str, None)
            if samples is not None and not REF_PATTERN.match(samples):
                r.problem("samples.function", f"{samples!r} is not 'package.module:function'")
        else:
            r.problem("samples", "must be a table with function = 'module:function'")
    if sequence is not None:
        pre = Step("", None, None, session_outputs(data.get("session"), _tensors, r), {})
        post_raw = data.get("postprocess")
        post_raw = {k: v for k, v in post_raw.items() if k == "function"} if isinstance(
            post_raw, dict) else None  # fmt: skip
        if post_raw == {}:
            r.problem("postprocess.function", "is missing; give function = 'module:function'")
        if core_state is not None:  # its step class answers: no postprocess function
            post = Step("", None, None, (), {})
        else:
            post = replace(_step(r, post_raw, "postprocess", "", False), model="", deployments={})
    else:
        pre = _step(r, data.get("preprocess"), "preprocess", f"{name}_preprocess", True)
        post = _step(r, data.get("postprocess"), "postprocess", f"{name}_postprocess", False)
    pipeline = Pipeline(
        name=name,
        summary=r.get(data, "summary", "", str, ""),
        doc=r.get(data, "doc", "", str, ""),
        max_batch_size=max_batch,
        inputs=_tensors(r, data.get("input"), "input"),
        outputs=_tensors(r, data.get("output"), "output"),
        preprocess=pre,
        core=_core(r, data.get("model"), name, max_batch),
        postprocess=post,
        samples=samples,
        tests=r.get(data, "tests", "", bool, True),
        source=source,
        sequence=sequence,
        session=session,
        probe=_probe(r, data["probe"]) if "probe" in data else None,
        core_state=core_state,
        one_step_gpu=r.get(data, "one_step_gpu", "", bool, False),
    )
    if "openai_embeddings" in data:
        spec = _openai(r, data["openai_embeddings"], pipeline)
        pipeline = replace(pipeline, openai_embeddings=spec)
    if "canary" in data:
        spec = parse_canary(r, data["canary"], [t.name for t in pipeline.outputs])
        pipeline = replace(pipeline, canary=spec)
    if "drift" in data:
        spec = parse_drift(r, data["drift"], pipeline.samples, pipeline.stateful)
        pipeline = replace(pipeline, drift=spec)
    if core_state is not None and session is not None:  # the graph serves under its name
        pipeline = replace(pipeline, core=replace(pipeline.core, model=session.model))
    if sequence is not None:
        check_stateful_tables(r, data, sequence, [t.name for t in pipeline.inputs])
    functions = (pipeline.preprocess.function, pipeline.postprocess.function)
    if max_batch == 0 and (any(functions) or (sequence is not None and core_state is None)):
        r.problem("max_batch_size", "0: give 1 or more for function steps (the generator runs "
                  "them on batches of samples); 0 (one request = one item, no batch dim) is "
                  "for steps that are PythonStep classes (step = 'module:Class')")  # fmt: skip
    if not pipeline.inputs:
        r.problem("input", "no request tensors; add [[input]] tables (name, dtype, dims)")
    if not pipeline.outputs:
        r.problem("output", "no response tensors; add [[output]] tables (name, dtype, dims)")
    names = [m for m in pipeline.models if m]
    if len(set(names)) != len(names):
        r.problem("model", f"the models' names must differ: {names}")
    for model in names if sequence is not None else names[1:]:
        if not NAME_PATTERN.match(model):
            r.problem("model", f"{model!r} is not a valid model name (lower-case, digits, _)")
    for where, step in (("preprocess", pipeline.preprocess), ("postprocess", pipeline.postprocess)):
        for called in step.calls:
            if called in (step.model, pipeline.name):
                what = "its own model" if called == step.model else "its own pipeline"
                r.problem(
                    f"{where}.calls",
                    f"'{called}' is {what}: a step calling itself through BLS never returns; "
                    "call another model",
                )
    if pipeline.one_step_gpu:
        reason = one_step_gpu_refusal(pipeline)
        if reason:
            r.problem("one_step_gpu", f"{reason}; drop one_step_gpu (the ensemble serves it)")
    if pipeline.samples is None and pipeline.tests:
        r.problem("samples", "is missing; add [samples] function = 'module:function' (the "
                  "health probe, parity, INT8 calibration and the tests use it)")  # fmt: skip
    if r.problems:
        raise DescriptionError(source, r.problems)
    return pipeline


def _openai(r: _Reader, raw: Any, pipeline: Pipeline) -> OpenAiEmbeddings | None:
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


def one_step_gpu_refusal(pipeline: Pipeline) -> str | None:
    """Why ``pipeline`` cannot run as one Python model on the GPU in the ``torch_gpu`` set
    (``one_step_gpu = true``; :mod:`tritonrepo.pipelines.chained_step`), or None when it can."""
    if pipeline.stateful:
        return "a stateful pipeline is one session model already"
    if pipeline.max_batch_size == 0:
        return ("max_batch_size = 0: one request per execute would give the GPU one request "
                "per forward; the ensemble's core batches across requests")  # fmt: skip
    if pipeline.preprocess.calls or pipeline.postprocess.calls:
        return "a step calls other models"
    if "torch_gpu" not in pipeline.core.deployments:
        return "its core has no torch_gpu set ([model.torch_gpu], a torch.export program)"
    return None


def load(path: Path | str) -> Pipeline:
    """Read and check ``path`` (a ``pipeline.toml``).

    Raises:
        DescriptionError: the file is missing, is not TOML, or has structural problems.
    """
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DescriptionError(
            path, ["no such file; write pipelines/<name>/pipeline.toml"]
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise DescriptionError(path, [f"not valid TOML: {exc}"]) from None
    if is_graph(data):  # [models.<key>] and [[step]]: several core models
        return parse_graph(data, path.resolve())  # type: ignore[return-value]
    return parse(data, path.resolve())


def import_ref(ref: str) -> Callable[..., Any]:
    """The object ``ref`` (``package.module:attribute``) names.

    Raises:
        ImportError: the module cannot be imported (its own error included) or has no such
            attribute.
    """
    module_name, _, attribute = ref.partition(":")
    module = importlib.import_module(module_name)
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ImportError(f"module '{module_name}' has no attribute '{attribute}'") from None


def discover(root: Path) -> list[Path]:
    """The descriptions under ``root`` (``root/<name>/pipeline.toml``), sorted by name."""
    return sorted(root.glob(f"*/{DESCRIPTION_FILE}")) if root.is_dir() else []
