"""The files of a graph description (``[models.<key>]`` and ``[[step]]``): the ensemble that
runs the steps in order, each Python step's configs and ``model.py``, each core's config sets
and version folders, and the generated test module (no I/O here).

A Python step's configs are those of a single-core description's steps
(:func:`builders.pipeline.render.step_config`); one with ``calls`` also gets ``models``
(``key=model``, read by :class:`tritonrepo.pipelines.function_step.FunctionStep`) and
``tritonrepo_calls`` (the model names: the launcher, health checks and ``models load`` load
them with the pipeline). Each core gets the config sets a single core gets
(:func:`builders.pipeline.render.core_config`); its ``config.pbtxt`` runs ONNX Runtime where
no TensorRT plan is built (module :data:`NO_PLAN`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from builders.pipeline import render
from builders.pipeline.checks_graph import GraphChecked
from builders.pipeline.config_writer import EnsembleStep, ModelConfig, config_text
from builders.pipeline.generated_files import header_comment
from builders.pipeline.generated_files import test_module as suite_module
from builders.pipeline.model_configs import core_config, core_sets, step_config, tensor_configs
from tritonrepo.description import GraphPipeline, GraphStep
from tritonrepo.pipelines.step_calls import format_models
from tritonrepo_client.model_repository.config_sets import set_file

NO_PLAN = (
    "No TensorRT plan is built for the cores of a multi-model description yet, so config.pbtxt\n"
    "runs this model with ONNX Runtime on CPU instances too, like configs/cpu.pbtxt."
)


def ensemble_config(pipeline: GraphPipeline, checked: GraphChecked) -> str:
    """The ensemble's ``config.pbtxt``: the steps in order, each step's model tensors mapped
    to the pipeline's tensors; ``checked.probe`` becomes ``tritonrepo_probe``."""
    steps = []
    for step in pipeline.steps:
        mapped = checked.mapped_outputs.get(step.index, ())
        if step.python is not None:
            model = step.python.model
            ins = [(n, n) for n in step.inputs]
            outs = [(n, n) for n in mapped]
        else:
            core = pipeline.cores[step.core or ""]
            model = core.model
            in_map, out_map = step.input_map or {}, step.output_map or {}
            ins = [
                (c.name, in_map.get(c.name, c.name)) for c in checked.core_inputs[step.core or ""]
            ]
            back = {
                out_map.get(c.name, c.name): c.name for c in checked.core_outputs[step.core or ""]
            }
            outs = [(back[n], n) for n in mapped]
        steps.append(EnsembleStep(model, tuple(ins), tuple(outs)))
    probe = {"tritonrepo_probe": checked.probe} if checked.probe is not None else {}
    config = ModelConfig(
        name=pipeline.name,
        platform="ensemble",
        max_batch_size=pipeline.max_batch_size,
        inputs=tensor_configs(pipeline.inputs),
        outputs=tensor_configs(pipeline.outputs),
        ensemble_steps=tuple(steps),
        parameters=probe,
        comment=header_comment(pipeline, pipeline.summary, pipeline.doc),
    )
    return config_text(config)


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
    ins, outs = checked.step_inputs[step.index], checked.step_outputs[step.index]
    files = {
        folder / set_file(config_set): step_config(pipeline, python, ins, outs, config_set)
        for config_set in python.deployments
    }
    summary = f"{', '.join(t.name for t in ins)} -> {', '.join(t.name for t in outs)}"
    files[folder / "1" / "model.py"] = render.model_py(
        pipeline,
        python,
        step.index + 1,
        summary,  # type: ignore[arg-type]
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


def test_module(pipeline: GraphPipeline) -> str:
    """``tests/pipelines/test_<name>.py``: :class:`tests.graph_suite.GraphSuite` bound to this
    description."""
    return suite_module(pipeline, "graph_suite:GraphSuite", "models")


def render_graph_files(
    pipeline: GraphPipeline, checked: GraphChecked, repository: Path, root: Path
) -> dict[Path, str]:
    """Every file of the pipeline: absolute path -> text (the test module under ``root``, the
    checkout)."""
    files: dict[Path, str] = {
        repository / pipeline.name / "config.pbtxt": ensemble_config(pipeline, checked),
        repository / pipeline.name / "1" / ".gitkeep": "",
    }
    for step in pipeline.python_steps:
        assert step.python is not None
        files.update(_python_configs(pipeline, step, checked, repository / step.python.model))
    for key, core in pipeline.cores.items():
        files.update(_core_configs(pipeline, key, checked, repository / core.model))
    if pipeline.tests:
        files[root / "tests" / "pipelines" / f"test_{pipeline.name}.py"] = test_module(pipeline)
    return files
