"""What the two one-step serving forms of a single-core pipeline share: the pipeline's config as
one Python-backend model (:func:`one_step_config`) and its ``model.py`` (:func:`one_step_model_py`).

The CPU one-step model (:mod:`builders.pipeline.serving_forms.fused_cpu`) runs the functions and
the ONNX core in one process; the GPU one (:mod:`builders.pipeline.serving_forms.chained_gpu`)
runs the three models' own code there. A pipeline can have both (a version folder holds one
``model.py``): it names :class:`tritonrepo.pipelines.one_step.OneStep`, which runs the form the
loaded config names. Both serve under the pipeline's name, with its inputs and outputs, the
core's served versions and Triton's plain queue (:data:`tritonrepo.server.queue_policy.PLAIN`).
"""

from __future__ import annotations

from collections.abc import Mapping

from builders.pipeline.config_writer import (
    DynamicBatching,
    InstanceGroup,
    ModelConfig,
    config_text,
)
from builders.pipeline.generated_files import header_comment, python_model
from builders.pipeline.model_configs import tensor_configs
from tritonrepo.description import Deployment, Pipeline
from tritonrepo_format.roles import ONE_STEP_CLASS


def one_step_config(
    pipeline: Pipeline,
    doc: str,
    instances: int,
    kind: str,
    deployment: Deployment,
    parameters: Mapping[str, str],
) -> str:
    """The pipeline's config as one Python-backend model: ``instances`` of ``kind``
    (``KIND_CPU``/``KIND_GPU``), ``deployment``'s batching with the plain queue, ``parameters``."""
    config = ModelConfig(
        name=pipeline.name,
        backend="python",
        max_batch_size=pipeline.max_batch_size,
        versions=pipeline.core.versions,
        inputs=tensor_configs(pipeline.inputs),
        outputs=tensor_configs(pipeline.outputs, labels=True),
        instance_group=InstanceGroup(instances, kind),
        dynamic_batching=DynamicBatching(
            deployment.max_queue_delay_us, deployment.preferred_batch_sizes
        ),
        parameters=parameters,
        comment=header_comment(pipeline, pipeline.summary, doc),
    )
    return config_text(config)


def one_step_model_py(pipeline: Pipeline) -> str:
    """The one-step model's ``model.py``, one file for both sets: a subclass of
    :data:`ONE_STEP_CLASS`, which runs the form the loaded config names."""
    docstring = (
        f'"""{pipeline.name} in one step: preprocess -> {pipeline.core.model} -> postprocess.\n\n'
        "On the CPU or the GPU, as the loaded config names (tritonrepo/pipelines/one_step.py).\n"
        '"""'
    )
    return python_model(docstring, ONE_STEP_CLASS)
