"""Reading a description of one core model (:func:`parse`): ``[preprocess]``, ``[model]``,
``[postprocess]``, or the stateful ``[sequence]`` and ``[session]`` (the state in the session
step or, with ``[[sequence.state]]``, in the core), and the optional tables. The type:
:class:`~tritonrepo.description.schema.Pipeline`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from tritonrepo.description.parse.core_state import parse_core_state, session_states
from tritonrepo.description.parse.model_tables import read_core, read_step
from tritonrepo.description.parse.options import parse_canary, parse_drift, parse_openai
from tritonrepo.description.parse.reader import (
    Reader,
    read_function_table,
    read_probe,
    read_tensors,
)
from tritonrepo.description.parse.stateful import (
    check_stateful_tables,
    parse_sequence,
    parse_session,
    session_outputs,
)
from tritonrepo.description.schema.single_core import Pipeline
from tritonrepo.description.schema.stateful import CoreState, SequenceSpec, SessionSpec
from tritonrepo.description.schema.tables import (
    DEFAULT_MAX_BATCH_SIZE,
    NAME_PATTERN,
    DescriptionError,
    Step,
)
from tritonrepo_format.config_sets import TORCH_GPU_SET

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
_Stateful = tuple[SequenceSpec | None, SessionSpec | None, CoreState | None]


def parse(data: Mapping[str, Any], source: Path) -> Pipeline:
    """A :class:`Pipeline` from parsed TOML ``data`` (``source``: the file, for messages and
    :attr:`Pipeline.folder`).

    Raises:
        DescriptionError: every structural problem, each naming its field and the fix.
    """
    r = Reader()
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
    sequence, session, core_state = _stateful(r, data, name)
    samples = read_function_table(r, data, "samples")
    pre, post = _steps(r, data, name, sequence, core_state)
    pipeline = Pipeline(
        name=name,
        summary=r.get(data, "summary", "", str, ""),
        doc=r.get(data, "doc", "", str, ""),
        max_batch_size=max_batch,
        inputs=read_tensors(r, data.get("input"), "input"),
        outputs=read_tensors(r, data.get("output"), "output"),
        preprocess=pre,
        core=read_core(r, data.get("model"), name, max_batch),
        postprocess=post,
        samples=samples,
        tests=r.get(data, "tests", "", bool, True),
        source=source,
        sequence=sequence,
        session=session,
        probe=read_probe(r, data["probe"]) if "probe" in data else None,
        core_state=core_state,
        one_step_gpu=r.get(data, "one_step_gpu", "", bool, False),
    )
    pipeline = _options(r, data, pipeline)
    if core_state is not None and session is not None:  # the graph serves under its name
        pipeline = replace(pipeline, core=replace(pipeline.core, model=session.model))
    if sequence is not None:
        check_stateful_tables(r, data, sequence, [t.name for t in pipeline.inputs])
    _check_whole(r, pipeline)
    if r.problems:
        raise DescriptionError(source, r.problems)
    return pipeline


def _stateful(r: Reader, data: Mapping[str, Any], name: str) -> _Stateful:
    """``[sequence]``, ``[session]`` (with the state a core returns) and a session step class,
    each None when not described."""
    if "sequence" in data:
        sequence = parse_sequence(r, data["sequence"])
        states = session_states(r, data)
        session = parse_session(r, data.get("session"), name, states)
        return sequence, session, parse_core_state(r, data)
    if "session" in data:
        r.problem("session", "needs a [sequence] table (a stateful pipeline); add one or drop it")
    return None, None, None


def _steps(
    r: Reader,
    data: Mapping[str, Any],
    name: str,
    sequence: SequenceSpec | None,
    core_state: CoreState | None,
) -> tuple[Step, Step]:
    """The preprocess and postprocess steps: the tables of a stateless pipeline; for a stateful
    one, the session's outputs and the postprocess function the session model runs (none with
    state in the core: its step class answers)."""
    if sequence is None:
        pre = read_step(r, data.get("preprocess"), "preprocess", f"{name}_preprocess", True)
        post = read_step(r, data.get("postprocess"), "postprocess", f"{name}_postprocess", False)
        return pre, post
    pre = Step("", None, None, session_outputs(r, data.get("session")), {})
    post_raw = data.get("postprocess")
    post_raw = {k: v for k, v in post_raw.items() if k == "function"} if isinstance(
        post_raw, dict) else None  # fmt: skip
    if post_raw == {}:
        r.problem("postprocess.function", "is missing; give function = 'module:function'")
    if core_state is not None:
        return pre, Step("", None, None, (), {})
    post = read_step(r, post_raw, "postprocess", "", False)
    return pre, replace(post, model="", deployments={})


def _options(r: Reader, data: Mapping[str, Any], pipeline: Pipeline) -> Pipeline:
    """``pipeline`` with its ``[openai_embeddings]``, ``[canary]`` and ``[drift]`` tables."""
    if "openai_embeddings" in data:
        spec = parse_openai(r, data["openai_embeddings"], pipeline)
        pipeline = replace(pipeline, openai_embeddings=spec)
    if "canary" in data:
        canary = parse_canary(r, data["canary"], [t.name for t in pipeline.outputs])
        pipeline = replace(pipeline, canary=canary)
    if "drift" in data:
        drift = parse_drift(r, data["drift"], pipeline.samples, pipeline.stateful)
        pipeline = replace(pipeline, drift=drift)
    return pipeline


def _check_whole(r: Reader, pipeline: Pipeline) -> None:
    """What needs the whole description: batching of function steps, request and response
    tensors, the models' names, calls to itself, ``one_step_gpu``, samples."""
    sequence, core_state = pipeline.sequence, pipeline.core_state
    functions = (pipeline.preprocess.function, pipeline.postprocess.function)
    if pipeline.max_batch_size == 0 and (
        any(functions) or (sequence is not None and core_state is None)
    ):
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
    if TORCH_GPU_SET not in pipeline.core.deployments:
        return "its core has no torch_gpu set ([model.torch_gpu], a torch.export program)"
    return None
