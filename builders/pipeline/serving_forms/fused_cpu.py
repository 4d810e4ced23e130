"""The fused CPU serving form of a single-core pipeline (the ``cpu`` config set): the one-step
model's ``<name>/configs/cpu.pbtxt`` and
``<name>/<version>/model.py``, which run preprocess → core (ONNX Runtime) → postprocess in one
Python-backend ``execute`` (:mod:`tritonrepo.pipelines.fused_step`, which says why).

``config.pbtxt`` (TensorRT) and ``configs/torch_gpu.pbtxt`` keep the ensemble of three models;
the step models and the core's ``cpu`` config are still generated, so the ensemble can be loaded
on a CPU server too (the parity test loads both). Only a pipeline of the usual shape is fused
(:func:`fused_refusal` says why another is not): one core model run by ONNX Runtime on CPU, and
preprocess and postprocess given as functions that call no model (a stateful description is
another kind, with no serving forms).

The fused model takes the core's ``cpu`` deployment (dynamic batching delays and preferred
sizes, ONNX Runtime parameters; instances: :func:`fused_instances`) with Triton's
plain queue (:data:`tritonrepo.server.queue_policy.PLAIN`, which says why): priorities,
queue bounds and request timeouts apply to the ensemble's core, not here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from builders.pipeline.kinds.base import Checked
from builders.pipeline.model_configs import CODE_ROOT, CoreTensor, version_folders
from builders.pipeline.serving_forms.one_step import one_step_config, one_step_model_py
from tritonrepo.description import Pipeline, Tensor
from tritonrepo_format.config_sets import CONFIG_SETS
from tritonrepo_format.dtypes import BY_NAME
from tritonrepo_format.roles import PROBE_PARAMETER

FUSED_SET = "cpu"
# Instances of the one-step model when the core's cpu deployment asks for one
# (fused_instances): one when every input is a number tensor, two when an input is BYTES.
# - Numeric inputs (tabular rows): the steps are numpy over the whole batch, so the cost of an
#   execute is mostly its fixed part, and one instance makes larger batches. On 2 cores at c=16
#   through the HTTP guard (wrk, 6 s runs), one instance served 6,750-7,170 click_lightgbm
#   requests/s against 6,100-6,150 for two (batches of 7 against 4), and breast_cancer
#   5,950-6,070 against 5,190-5,490, with p99 within 1 ms of each other. ONNX Runtime then gets
#   every core (share_of_cores).
# - BYTES inputs (encoded images, texts): the steps decode item by item in Python under the
#   GIL, so a second stub process is what uses a second core, and one large item does not hold
#   every other one behind it: nudenet_detector served 79.7 against 72.6 images/s with two.
NUMERIC_INSTANCES = 1
BYTES_INSTANCES = 2
FUSED_DOC = (
    "One Python-backend model on CPU: preprocess -> core (ONNX Runtime) -> postprocess in one\n"
    "execute, without the ensemble's hops (tritonrepo/pipelines/fused_step.py). config.pbtxt\n"
    "keeps the ensemble for the GPU."
)


def fused_refusal(pipeline: Pipeline) -> str | None:
    """Why the single-core stateless ``pipeline`` gets no one-step CPU model, or None when it
    gets one."""
    if pipeline.max_batch_size == 0:
        return "max_batch_size = 0: its steps hand the core all rows of a request"
    steps = (pipeline.preprocess, pipeline.postprocess)
    if any(s.function is None for s in steps):
        return "a step is a PythonStep class, not a function"
    if any(s.calls for s in steps):
        return "a step calls other models"
    if FUSED_SET not in pipeline.core.deployments:
        return "its core has no cpu set"
    if CONFIG_SETS[FUSED_SET].core_runtime != "onnxruntime_python":
        return "the cpu set's core does not run ONNX Runtime in Python"
    return None


def fused_config(
    pipeline: Pipeline,
    core_inputs: Sequence[CoreTensor],
    probe: str | None,
) -> str:
    """The pipeline's ``configs/cpu.pbtxt``: the pipeline's inputs and outputs, the core's
    ``cpu`` deployment, and the parameters of
    :class:`~tritonrepo.pipelines.fused_step.FusedStep`."""
    core = pipeline.core
    deployment = core.deployments[FUSED_SET]
    pre_outputs = [*(t.as_tensor() for t in core_inputs), *pipeline.preprocess.outputs]
    parameters = {
        "preprocess": pipeline.preprocess.function or "",
        "postprocess": pipeline.postprocess.function or "",
        "code_root": CODE_ROOT,
        "core_model": core.model,
        "core_file": CONFIG_SETS[FUSED_SET].core_file,
        "preprocess_outputs": json.dumps([_output(t) for t in pre_outputs], separators=(",", ":")),
        **deployment.parameters,
    }
    if probe is not None:
        parameters[PROBE_PARAMETER] = probe
    parameters |= pipeline.openai_parameter()
    parameters |= pipeline.drift_parameter()
    parameters |= pipeline.canary_parameter()
    instances = fused_instances(pipeline)
    return one_step_config(pipeline, FUSED_DOC, instances, "KIND_CPU", deployment, parameters)


def fused_instances(pipeline: Pipeline) -> int:
    """Instances of the one-step model: the core's cpu deployment's ``instances`` when it asks
    for more than one, else :data:`BYTES_INSTANCES` when an input is BYTES and
    :data:`NUMERIC_INSTANCES` when all are numbers (the constants say what was measured)."""
    asked = pipeline.core.deployments[FUSED_SET].instances
    if asked > 1:
        return asked
    if any(t.dtype == "BYTES" for t in pipeline.inputs):
        return BYTES_INSTANCES
    return NUMERIC_INSTANCES


def _output(t: Tensor) -> dict[str, object]:
    return {"name": t.name, "data_type": BY_NAME[t.dtype].config_name, "dims": list(t.dims)}


def fused_files(
    pipeline: Pipeline, checked: Checked, repository: Path, rendered: Mapping[Path, str]
) -> dict[Path, str]:
    """The one-step model's files in the pipeline's folder: its ``configs/cpu.pbtxt`` and a
    ``model.py`` in each of the core's version folders (its served versions and the staged INT8
    one, so that a rollout of the pipeline to version N serves ``<core>/N/``). ``rendered`` is
    not needed."""
    folder = repository / pipeline.name
    config = fused_config(pipeline, checked.core_inputs, checked.probe)
    files = {folder / "configs" / f"{FUSED_SET}.pbtxt": config}
    for version in version_folders(pipeline.core):
        files[folder / str(version) / "model.py"] = one_step_model_py(pipeline)
    return files
