"""The graph kind: a description of several core models (``[models.<key>]`` and ``[[step]]``;
the shape: :mod:`tritonrepo.description.parse.graph`), served as one ensemble of its steps.

Checked (:meth:`GraphKind.check`), before anything is written: the models against the
repository, the steps' functions imported, each core's graph, the wiring of the steps
(:mod:`builders.pipeline.kinds.graph_wiring`), then the samples through the whole chain in one
process (:class:`builders.pipeline.graph_in_process.GraphInProcess`), every hand-over checked.

Its files (:meth:`GraphKind.files`): the ensemble that runs the steps in order
(:func:`ensemble_config`), each Python step's configs and ``model.py``, each core's config sets
and version folders, and the generated test module (:class:`tests.graph_suite.GraphSuite`).
A Python step's configs are those of a single-core description's steps
(:func:`builders.pipeline.model_configs.step_config`); one with ``calls`` also gets ``models``
(``key=model``, read by :class:`tritonrepo.pipelines.function_step.FunctionStep`) and
``tritonrepo_calls`` (the model names: the launcher, health checks and ``models load`` load them
with the pipeline). Each core gets the config sets a single core gets
(:func:`builders.pipeline.model_configs.core_config`); its ``config.pbtxt`` runs ONNX Runtime
where no TensorRT plan is built (:data:`NO_PLAN`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from builders.pipeline.config_writer import EnsembleStep
from builders.pipeline.generated_files import (
    STEP_CLASS,
    step_model_py,
    tensor_summary,
    test_module,
)
from builders.pipeline.graph import ModelSourceError, graph_io, obtain_model
from builders.pipeline.graph_in_process import GraphInProcess
from builders.pipeline.kinds.base import (
    check_clashes,
    compare_tensors,
    import_function,
    raise_problems,
    raised_at,
    tensorrt_parses,
)
from builders.pipeline.kinds.core_model import core_tensors
from builders.pipeline.kinds.declared import probe_table_json
from builders.pipeline.kinds.graph_wiring import Wiring, check_wiring
from builders.pipeline.kinds.sample_checks import (
    MIN_SAMPLE_ROWS,
    PROBE_LIMIT_BYTES,
    check_core_outputs,
    probe_json,
    quiet_session_options,
)
from builders.pipeline.model_configs import CoreTensor, core_config, core_sets, step_config
from builders.pipeline.serving_forms.ensemble import ensemble_config, probe_parameter
from tritonrepo.description import GraphPipeline, GraphStep
from tritonrepo.pipelines.step_calls import format_models
from tritonrepo_format.config_sets import set_file

NO_PLAN = (
    "No TensorRT plan is built for the cores of a multi-model description yet, so config.pbtxt\n"
    "runs this model with ONNX Runtime on CPU instances too, like configs/cpu.pbtxt."
)


@dataclass(frozen=True)
class GraphChecked:
    """What the checks established: per core key its config tensors, ONNX model and whether a
    TensorRT plan can serve it (no dynamic non-batch dims, no ``ai.onnx.ml``); the wiring (per
    Python step its tensors, per step the outputs the ensemble maps); the probe JSON (None
    without samples)."""

    core_inputs: Mapping[str, tuple[CoreTensor, ...]]
    core_outputs: Mapping[str, tuple[CoreTensor, ...]]
    models: Mapping[str, Any]
    tensorrt: Mapping[str, bool]
    wiring: Wiring
    probe: str | None


def _cores(pipeline: GraphPipeline, problems: list[str]) -> tuple[dict, dict, dict, dict]:
    """Per core key: its config tensors (inputs, outputs), its ONNX model and whether a
    TensorRT plan can serve it; a core's problems are named ``models.<key>...``."""
    core_in, core_out, models, tensorrt = {}, {}, {}, {}
    for key, core in pipeline.cores.items():
        field = f"models.{key}"
        if core.builder is not None or core.int8:
            problems.append(
                f"{field}: a builder module and int8 are for single-core "
                "descriptions; give onnx = '...' or build = 'module:function'"
            )
            continue
        view = pipeline.core_view(key)
        sub: list[str] = []
        import_function(core.build, f"{field}.build", sub)
        if not sub:
            try:
                models[key] = obtain_model(view)
            except ModelSourceError as exc:
                sub.append(str(exc))
        if key in models:
            ins, outs = core_tensors(core, graph_io(models[key]), sub)
            core_in[key], core_out[key] = ins, outs
            dynamic = any(-1 in c.dims for c in ins)
            tensorrt[key] = tensorrt_parses(models[key]) and not dynamic
        problems += [p.replace("model", field, 1) if p.startswith("model") else p for p in sub]
    return core_in, core_out, models, tensorrt


def _run_chain(
    pipeline: GraphPipeline, models: Mapping[str, Any], samples: dict, problems: list[str]
) -> None:
    """The samples through every step, each hand-over checked against the wiring."""
    options = quiet_session_options()
    runner = GraphInProcess(
        pipeline, {k: m.SerializeToString() for k, m in models.items()}, options
    )
    tensors = dict(samples)
    for step in pipeline.steps:
        where = step.where
        if step.python is not None and step.python.function is None:
            return  # a step class runs only in the server
        try:
            out = runner.run_step(step, tensors)
        except Exception as exc:
            what = step.python.ref if step.python is not None else f"core '{step.core}'"
            problems.append(f"{where}: {what} failed on the samples{raised_at(exc)}: {exc!r}")
            return
        if step.python is not None:
            field = f"{where}.function"
            compare_tensors(
                out, step.python.outputs, field, "declared in its outputs", problems, None
            )
            extra = sorted(set(out) - {t.name for t in step.python.outputs})
            if extra:
                problems.append(
                    f"{field}: returns {extra}, not declared in its outputs; "
                    "declare them or drop them"
                )
        else:
            core = runner.cores[step.core or ""]
            who = f"{pipeline.name}: models.{step.core}"
            check_core_outputs(
                models[step.core], core.feeds[-1], core.names, core.last, problems, who
            )
        if problems:
            return
        tensors.update(out)
    compare_tensors(
        tensors,
        pipeline.outputs,
        "output",
        "the response tensor",
        problems,
        "the request nor any step's outputs",
    )


def _samples(pipeline: GraphPipeline, problems: list[str]) -> tuple[dict | None, str | None]:
    """The samples (checked against the request tensors) and the probe JSON: the ``[probe]``
    table when the description has one
    (:func:`builders.pipeline.kinds.declared.probe_table_json`), else the smallest sample row."""
    declared_probe = probe_table_json(pipeline, problems)
    make = import_function(pipeline.samples, "samples.function", problems)
    if make is None:
        return None, declared_probe
    try:
        samples = make()
    except Exception as exc:
        problems.append(f"samples.function: failed{raised_at(exc)}: {exc!r}")
        return None, None
    if not isinstance(samples, dict):
        problems.append("samples.function: must return {input name: batch-first array}")
        return None, None
    compare_tensors(
        samples, pipeline.inputs, "samples.function", "the request tensor", problems, "the samples"
    )
    counts = {len(np.asarray(v)) for v in samples.values()}
    if len(counts) != 1 or min(counts) < MIN_SAMPLE_ROWS:
        problems.append(
            f"samples.function: returns {sorted(counts)} rows; give at least "
            f"{MIN_SAMPLE_ROWS}, the same number in every tensor"
        )
    if problems:
        return None, None
    if declared_probe is not None:
        return samples, declared_probe
    probe = probe_json(pipeline, samples)
    if len(probe) > PROBE_LIMIT_BYTES:
        problems.append(
            f"samples.function: the smallest sample request is {len(probe)} bytes as JSON, over "
            f"{PROBE_LIMIT_BYTES} for the health probe in the config; declare a "
            "smaller one in a [probe] table"
        )
    return samples, probe


def ensemble_steps(pipeline: GraphPipeline, checked: GraphChecked) -> list[EnsembleStep]:
    """The ensemble's steps in order, each step's model tensors mapped to the pipeline's (a
    core step's graph tensors renamed by its ``inputs``/``outputs`` tables; only the outputs a
    later step takes or the response answers)."""
    steps = []
    for step in pipeline.steps:
        mapped = checked.wiring.mapped_outputs.get(step.index, ())
        if step.python is not None:
            model = step.python.model
            ins = [(n, n) for n in step.inputs]
            outs = [(n, n) for n in mapped]
        else:
            key = step.core or ""
            model = pipeline.cores[key].model
            in_map, out_map = step.input_map or {}, step.output_map or {}
            ins = [(c.name, in_map.get(c.name, c.name)) for c in checked.core_inputs[key]]
            back = {out_map.get(c.name, c.name): c.name for c in checked.core_outputs[key]}
            outs = [(back[n], n) for n in mapped]
        steps.append(EnsembleStep(model, tuple(ins), tuple(outs)))
    return steps


def _python_configs(
    pipeline: GraphPipeline, step: GraphStep, checked: GraphChecked, folder: Path
) -> dict[Path, str]:
    python = step.python
    assert python is not None
    if python.calls:
        names = {key: pipeline.cores[key].model for key in python.calls}
        deployments = {
            k: replace(d, parameters={"models": format_models(names), **d.parameters})
            for k, d in python.deployments.items()
        }
        python = replace(python, deployments=deployments, calls=tuple(names.values()))
    ins, outs = checked.wiring.step_inputs[step.index], checked.wiring.step_outputs[step.index]
    files = {
        folder / set_file(config_set): step_config(pipeline, python, ins, outs, config_set)
        for config_set in python.deployments
    }
    summary = tensor_summary(ins, outs)
    files[folder / "1" / "model.py"] = step_model_py(
        pipeline, f"step {step.index + 1}", summary, python.ref, python.step or STEP_CLASS
    )
    return files


def _core_configs(
    pipeline: GraphPipeline, key: str, checked: GraphChecked, folder: Path
) -> dict[Path, str]:
    core = pipeline.cores[key]
    files = {}
    for config_set in core_sets(core):
        files[folder / set_file(config_set)] = core_config(
            pipeline,
            core,
            checked.core_inputs[key],
            checked.core_outputs[key],
            config_set,
            tensorrt=False,
            no_tensorrt=NO_PLAN,
        )
    for version in core.versions:
        files[folder / str(version) / ".gitkeep"] = ""
    return files


class GraphKind:
    """The kind of a description of several core models (module docstring)."""

    name = "several models"
    suite = "graph_suite:GraphSuite"  # the generated tests' suite (tests/)

    def check(self, pipeline: GraphPipeline, repository: Path, owned: set[str],
              force: bool) -> GraphChecked:  # fmt: skip
        """:meth:`builders.pipeline.kinds.base.Kind.check` (module docstring)."""
        problems: list[str] = []
        check_clashes(pipeline, repository, owned, force, problems)
        for step in pipeline.python_steps:
            assert step.python is not None
            kind = "function" if step.python.function else "step"
            import_function(step.python.ref, f"{step.where}.{kind}", problems)
        core_in, core_out, models, tensorrt = _cores(pipeline, problems)
        wiring = Wiring({}, {}, {})
        if not problems:
            wiring = check_wiring(pipeline, core_in, core_out, problems)
        probe = None
        if not problems:
            samples, probe = _samples(pipeline, problems)
            if samples is not None and not problems:
                _run_chain(pipeline, models, samples, problems)
        raise_problems(pipeline, problems)
        return GraphChecked(core_in, core_out, models, tensorrt, wiring, probe)

    def files(
        self, pipeline: GraphPipeline, checked: GraphChecked, repository: Path, root: Path
    ) -> dict[Path, str]:
        """:meth:`builders.pipeline.kinds.base.Kind.files` (module docstring)."""
        folder = repository / pipeline.name
        steps = ensemble_steps(pipeline, checked)
        files: dict[Path, str] = {
            folder / "config.pbtxt": ensemble_config(
                pipeline, steps, probe_parameter(checked.probe) | pipeline.canary_parameter()
            ),
            folder / "1" / ".gitkeep": "",
        }
        for step in pipeline.python_steps:
            assert step.python is not None
            files.update(_python_configs(pipeline, step, checked, repository / step.python.model))
        for key, core in pipeline.cores.items():
            files.update(_core_configs(pipeline, key, checked, repository / core.model))
        if pipeline.tests:
            path = root / "tests" / "pipelines" / f"test_{pipeline.name}.py"
            files[path] = test_module(pipeline, self.suite, "models")
        return files


GRAPH = GraphKind()
