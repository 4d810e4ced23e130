"""The chained GPU serving form of a single-core pipeline with ``one_step_gpu = true`` (the
``torch_gpu`` config set): the one-step model's
``<name>/configs/torch_gpu.pbtxt``, and ``model.py`` and ``stages.json`` in each version folder,
which run preprocess → core (``torch.export`` program) → postprocess in one Python-backend
``execute`` on the GPU (:mod:`tritonrepo.pipelines.chained_step`, which says why).

``config.pbtxt`` (TensorRT) keeps the ensemble, and the three models keep their own
``torch_gpu`` configs: ``stages.json`` holds those configs, parsed as Triton parses them, so each
stage is set up here exactly as its own model is. Which pipelines may ask for it:
:func:`tritonrepo.description.parse.single_core.one_step_gpu_refusal`.

The one-step model has as many instances as the busiest of its stages in the set (each instance
is one process, with its own copy of the program on the GPU), no queue delay (whatever queued
while the instances were busy is one batch, up to the pipeline's ``max_batch_size``) and
Triton's plain queue (:data:`tritonrepo.server.queue_policy.PLAIN`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from google.protobuf.json_format import MessageToDict

from builders.pipeline.generated_files import STEP_CLASS
from builders.pipeline.kinds.base import Checked
from builders.pipeline.model_configs import version_folders
from builders.pipeline.serving_forms.one_step import one_step_config, one_step_model_py
from tritonrepo.description import Deployment, Pipeline, Step
from tritonrepo.pipelines.chained_step import STAGES_FILE
from tritonrepo_format.config_sets import CONFIG_FILE, TORCH_GPU_SET, set_file
from tritonrepo_format.configs import parse_config
from tritonrepo_format.roles import (
    ONE_STEP_PARAMETER,
    PROBE_PARAMETER,
    STAGES_PARAMETER,
)

CHAINED_SET = TORCH_GPU_SET
CORE_CLASS = "tritonrepo.runners.torch_step:TorchProgramStep"  # backends/torch_python's model
CHAINED_DOC = (
    "One Python-backend model on the GPU: preprocess -> core (torch.export program) ->\n"
    "postprocess in one execute, without the ensemble's hops (one_step_gpu = true;\n"
    "tritonrepo/pipelines/chained_step.py). The stages are the three models, set up from their\n"
    "own torch_gpu configs (stages.json in the version folder). config.pbtxt keeps the ensemble."
)


def _deployment(step: Step) -> Deployment:
    return step.deployments.get(CHAINED_SET) or step.deployments["default"]


def chained_instances(pipeline: Pipeline) -> int:
    """Instances of the one-step model: the most any of its stages has in the set."""
    stages = (pipeline.preprocess, pipeline.postprocess)
    return max(
        pipeline.core.deployments[CHAINED_SET].instances,
        *(_deployment(s).instances for s in stages),
    )


def chained_config(pipeline: Pipeline, probe: str | None) -> str:
    """The pipeline's ``configs/torch_gpu.pbtxt``: the pipeline's inputs and outputs, GPU
    instances, no queue delay and Triton's plain queue."""
    steps = (pipeline.preprocess.model, pipeline.core.model, pipeline.postprocess.model)
    parameters = {ONE_STEP_PARAMETER: pipeline.core.model, STAGES_PARAMETER: ",".join(steps)}
    if probe is not None:
        parameters[PROBE_PARAMETER] = probe
    parameters |= pipeline.openai_parameter()
    parameters |= pipeline.drift_parameter()
    parameters |= pipeline.canary_parameter()
    instances = chained_instances(pipeline)
    return one_step_config(pipeline, CHAINED_DOC, instances, "KIND_GPU", Deployment(), parameters)


def stages(pipeline: Pipeline, repository: Path, files: Mapping[Path, str]) -> list[dict]:
    """``stages.json``'s list: per stage its model, class, version folder (``"this"``: the
    one-step model's own version), instance kind and config (from the rendered ``files``)."""

    def config(model: str, file: str) -> dict:
        path = repository / model / file
        return MessageToDict(parse_config(files[path], path), preserving_proto_field_name=True)

    def step(s: Step) -> dict:
        file = set_file(CHAINED_SET) if CHAINED_SET in s.deployments else CONFIG_FILE
        cls = s.step or STEP_CLASS
        return {
            "model": s.model,
            "class": cls,
            "version": "1",
            "kind": "CPU",
            "config": config(s.model, file),
        }

    core = pipeline.core.model
    return [
        step(pipeline.preprocess),
        {
            "model": core,
            "class": CORE_CLASS,
            "version": "this",
            "kind": "GPU",
            "config": config(core, set_file(CHAINED_SET)),
        },
        step(pipeline.postprocess),
    ]


def chained_refusal(pipeline: Pipeline) -> str | None:
    """Why ``pipeline`` gets no one-step GPU model (it does not ask for one), or None."""
    return None if pipeline.one_step_gpu else "its description does not set one_step_gpu"


def chained_files(
    pipeline: Pipeline, checked: Checked, repository: Path, rendered: Mapping[Path, str]
) -> dict[Path, str]:
    """The one-step model's files: its ``configs/torch_gpu.pbtxt``, and ``model.py`` and
    ``stages.json`` in each of the core's version folders (its served versions and the staged
    INT8 one, as for the CPU one-step model); the stages' configs are read from ``rendered``
    (the step and core configs already made)."""
    folder = repository / pipeline.name
    out = {folder / set_file(CHAINED_SET): chained_config(pipeline, checked.probe)}
    text = json.dumps(stages(pipeline, repository, rendered), indent=1) + "\n"
    for version in version_folders(pipeline.core):
        out[folder / str(version) / "model.py"] = one_step_model_py(pipeline)
        out[folder / str(version) / STAGES_FILE] = text
    return out
