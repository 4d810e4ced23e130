"""The single-core kind: a stateless description of one core model (``[preprocess]``,
``[model]``, ``[postprocess]``).

Checked (:meth:`SingleCoreKind.check`): the models against the repository, the models the steps
``calls``, the functions imported, the core's graph and tensors, then the samples through
preprocess -> core (ONNX Runtime) -> postprocess in one process, each hand-over checked
(:func:`run_samples`); the declared ``[probe]`` and ``ragged_inputs``.

Its files (:meth:`SingleCoreKind.files`): each step's configs and ``model.py``, the core's configs
and version folders, then the pipeline's own model in each config set
(:mod:`builders.pipeline.serving_forms`: the ensemble, the fused CPU and the chained GPU
one-step models), and the generated test module (:class:`tests.pipeline_suite.PipelineSuite`).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from builders.pipeline.generated_files import (
    STEP_CLASS,
    step_model_py,
    tensor_summary,
    test_module,
)
from builders.pipeline.in_process import InProcess
from builders.pipeline.kinds.base import (
    Checked,
    check_clashes,
    compare_tensors,
    import_function,
    raise_problems,
    raised_at,
    tensorrt_parses,
)
from builders.pipeline.kinds.core_model import core_files, core_graph, core_tensors
from builders.pipeline.kinds.declared import check_ragged_inputs, probe_table_json
from builders.pipeline.kinds.sample_checks import (
    MIN_SAMPLE_ROWS,
    PROBE_LIMIT_BYTES,
    check_core_outputs,
    probe_json,
    quiet_session_options,
)
from builders.pipeline.model_configs import CoreTensor, step_config
from builders.pipeline.serving_forms import form_files
from tritonrepo.description import Pipeline, Tensor
from tritonrepo_format.config_sets import set_file


def step_view(pipeline: Pipeline, tensors: Sequence[CoreTensor]) -> list[Tensor]:
    """The core model's tensors as the steps next to it declare them: as the core's, or, in a
    pipeline that does not batch (``max_batch_size = 0``: one request = one item, e.g. one
    user) around a core that does, with a leading ``-1``: a step hands the core all rows of its
    request at once (``[n, *dims]``), which reaches the core as one request of batch n."""
    core_batch = pipeline.core.deployments["default"].max_batch_size
    rows = pipeline.max_batch_size == 0 and bool(core_batch)
    return [Tensor(t.name, t.dtype, ((-1,) if rows else ()) + t.dims) for t in tensors]


def check_calls(pipeline: Pipeline, repository: Path, problems: list[str]) -> None:
    """Each model a step ``calls`` is in ``repository`` (a folder with ``config.pbtxt``) or is
    one of this pipeline's own models."""
    known = sorted(
        {p.parent.name for p in repository.glob("*/config.pbtxt")} | set(pipeline.models[1:])
    )
    for where, step in (("preprocess", pipeline.preprocess), ("postprocess", pipeline.postprocess)):
        for called in step.calls:
            if called in known or called in (step.model, pipeline.name):
                continue  # a call to itself is the description's own error
            close = difflib.get_close_matches(called, known, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            problems.append(
                f"{where}.calls: no model '{called}' in {repository.name}/{hint}; give the name "
                "of a model folder there (generate a called pipeline first: tritonrepo-new "
                "pipeline <its name>)"
            )


def run_samples(
    pipeline: Pipeline,
    make_samples: Callable[[], Any],
    pre: Any,
    post: Any,
    model: Any,
    core_inputs: Sequence[CoreTensor],
    problems: list[str],
) -> str | None:
    """Samples -> preprocess -> core (ONNX Runtime, ``model`` an ``onnx.ModelProto`` or None
    for a ``builder`` core) -> postprocess, checking each hand-over (``pre``/``post``: what the
    steps' references name; only functions are run); the probe JSON made from the samples
    (None when they are unusable). Problems are appended to ``problems``."""
    try:
        samples = make_samples()
    except Exception as exc:
        problems.append(f"samples.function: {pipeline.samples}() failed{raised_at(exc)}: {exc!r}")
        return None
    if not isinstance(samples, dict):
        problems.append("samples.function: must return {input name: batch-first array}")
        return None
    given = tuple(t for t in pipeline.inputs if not t.optional or t.name in samples)
    compare_tensors(samples, given, "samples.function", "the request tensor", problems,
                    "the samples")  # fmt: skip
    if problems:
        return None
    rows = {len(np.asarray(v)) for v in samples.values()}
    if len(rows) != 1 or min(rows) < MIN_SAMPLE_ROWS:
        problems.append(
            f"samples.function: returns {sorted(rows)} rows; give at least {MIN_SAMPLE_ROWS}, the "
            "same number in every tensor (the batch parity check compares them in one batch and "
            "row by row, and the INT8 calibration and the tests use them)"
        )
        return None
    probe = probe_json(pipeline, samples)
    if len(probe) > PROBE_LIMIT_BYTES:
        problems.append(
            f"samples.function: the smallest sample request is {len(probe)} bytes as JSON, over "
            f"{PROBE_LIMIT_BYTES} for the health probe in the config; add a smaller sample"
        )
    if pipeline.preprocess.function is None or pipeline.postprocess.function is None:
        return probe  # a step class runs only in the server
    try:
        pre_out = pre(dict(samples))
    except Exception as exc:
        problems.append(
            f"preprocess.function: {pipeline.preprocess.function} failed on the samples"
            f"{raised_at(exc)}: {exc!r}"
        )
        return probe
    graph_inputs = tuple(c.as_tensor() for c in core_inputs)
    want = (*graph_inputs, *pipeline.preprocess.outputs)
    neither = "the ONNX graph's inputs nor preprocess's outputs"
    compare_tensors(pre_out, graph_inputs, "preprocess.function",
                    "the core model's input", problems, None)  # fmt: skip
    compare_tensors(pre_out, pipeline.preprocess.outputs, "preprocess.function",
                    "declared in preprocess.outputs", problems, neither)  # fmt: skip
    extra = sorted(set(pre_out) - {t.name for t in want})
    if extra:
        problems.append(
            f"preprocess.function: returns {extra}, which the core model does not take; "
            "declare them under preprocess.outputs for postprocess, or drop them"
        )
    if problems or model is None:
        return probe
    runner = InProcess(pipeline, model.SerializeToString(), quiet_session_options())
    feeds = runner.core_feeds(pre_out)
    results = runner.run_core(feeds)
    check_core_outputs(model, feeds, runner.names, results, problems, f"{pipeline.name}: model")
    if problems:
        return probe
    post_in = runner.post_inputs(pre_out, results)
    try:
        post_out = post(post_in)
    except Exception as exc:
        problems.append(
            f"postprocess.function: {pipeline.postprocess.function} failed on the samples"
            f"{raised_at(exc)}: {exc!r}"
        )
        return probe
    compare_tensors(post_out, pipeline.outputs, "postprocess.function", "the response tensor",
                    problems, "the ONNX graph's outputs nor postprocess's outputs")  # fmt: skip
    return probe


class SingleCoreKind:
    """The kind of a stateless description of one core model (module docstring)."""

    name = "single core"
    suite = "pipeline_suite:PipelineSuite"  # the generated tests' suite (tests/)

    def check(self, pipeline: Pipeline, repository: Path, owned: set[str],
              force: bool) -> Checked:  # fmt: skip
        """:meth:`builders.pipeline.kinds.base.Kind.check` (module docstring)."""
        problems: list[str] = []
        check_clashes(pipeline, repository, owned, force, problems)
        check_calls(pipeline, repository, problems)
        pre_step, post_step = pipeline.preprocess, pipeline.postprocess
        pre = import_function(
            pre_step.ref, f"preprocess.{'function' if pre_step.function else 'step'}", problems
        )
        post = import_function(
            post_step.ref, f"postprocess.{'function' if post_step.function else 'step'}", problems
        )
        make_samples = import_function(pipeline.samples, "samples.function", problems)
        model, io = core_graph(pipeline, problems)
        core_inputs, core_outputs = core_tensors(pipeline.core, io, problems)
        probe = None
        if make_samples is not None and not problems:
            probe = run_samples(pipeline, make_samples, pre, post, model, core_inputs, problems)
        check_ragged_inputs(pipeline, core_inputs, core_outputs, problems)
        probe = probe_table_json(pipeline, problems) or probe  # a [probe] table wins
        raise_problems(pipeline, problems)
        tensorrt = model is None or tensorrt_parses(model)
        return Checked(core_inputs, core_outputs, probe, model, tensorrt)

    def files(
        self, pipeline: Pipeline, checked: Checked, repository: Path, root: Path
    ) -> dict[Path, str]:
        """:meth:`builders.pipeline.kinds.base.Kind.files` (module docstring)."""
        pre, post = pipeline.preprocess, pipeline.postprocess
        pre_out = [*step_view(pipeline, checked.core_inputs), *pre.outputs]
        post_in = [*step_view(pipeline, checked.core_outputs), *pre.outputs]
        steps = (
            (1, pre, pipeline.inputs, pre_out, pipeline.drift_parameter()),  # gets the requests
            (3, post, post_in, pipeline.outputs, {}),
        )
        files: dict[Path, str] = {}
        for number, step, ins, outs, extra in steps:
            folder = repository / step.model
            for config_set in step.deployments:
                text = step_config(pipeline, step, ins, outs, config_set, extra)
                files[folder / set_file(config_set)] = text
            summary = tensor_summary(ins, outs)
            files[folder / "1" / "model.py"] = step_model_py(
                pipeline, f"step {number}", summary, step.ref, step.step or STEP_CLASS
            )
        files.update(core_files(pipeline, checked, repository))
        files.update(form_files(pipeline, checked, repository, files))
        if pipeline.tests:
            path = root / "tests" / "pipelines" / f"test_{pipeline.name}.py"
            files[path] = test_module(pipeline, self.suite)
        return files


SINGLE_CORE = SingleCoreKind()
