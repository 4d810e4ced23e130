"""What the two one-step models of a described pipeline share: the pipeline's config as one
Python-backend model (:func:`one_step_config`) and its ``model.py`` (:func:`one_step_model_py`).

The CPU one-step model (:mod:`builders.pipeline.render_fused`) runs the functions and the ONNX
core in one process; the GPU one (:mod:`builders.pipeline.render_chained`) runs the three models'
own code there. A pipeline can have both (a version folder holds one ``model.py``): it names
:class:`tritonrepo.pipelines.one_step.OneStep`, which runs the form the loaded config names.
Both serve under the pipeline's name, with its inputs and outputs, the core's
served versions and Triton's plain queue (:data:`tritonrepo.server.queue_policy.PLAIN`).
"""

from __future__ import annotations

from collections.abc import Mapping

from builders.pipeline.render import _batching, _header, _io, _parameters
from tritonrepo.description import Deployment, Pipeline
from tritonrepo.server.queue_policy import PLAIN


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
    versions = ", ".join(str(v) for v in pipeline.core.versions)
    return "".join(
        [
            _header(pipeline, pipeline.summary, doc),
            f'name: "{pipeline.name}"\nbackend: "python"\n',
            f"max_batch_size: {pipeline.max_batch_size}\n",
            f"version_policy: {{ specific: {{ versions: [ {versions} ] }} }}\n",
            _io("input", pipeline.inputs),
            _io("output", pipeline.outputs, labels=True),
            f"instance_group [ {{ count: {instances} kind: {kind} }} ]\n",
            _batching(deployment, PLAIN),
            _parameters(parameters),
        ]
    )


ONE_STEP_CLASS = "tritonrepo.pipelines.one_step:OneStep"


def one_step_model_py(pipeline: Pipeline) -> str:
    """The one-step model's ``model.py``, one file for both sets: a subclass of
    :data:`ONE_STEP_CLASS`, which runs the form the loaded config names."""
    module, _, cls = ONE_STEP_CLASS.partition(":")
    return (
        f'"""{pipeline.name} in one step: preprocess -> {pipeline.core.model} -> postprocess.\n\n'
        "On the CPU or the GPU, as the loaded config names (tritonrepo/pipelines/one_step.py).\n"
        '"""\n\n'
        f"from {module} import {cls}\n\n\n"
        f"class TritonPythonModel({cls}):\n"
        f'    """Python-backend entry point; initialize/execute/finalize come from {cls}."""\n'
    )
