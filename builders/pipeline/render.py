"""The text of every file the generator writes for a pipeline (no I/O here).

Configs are written in the compact style of this repository's hand-written ones (``{ name: ...
dims: [ 3 ] }`` per tensor, one queue-policy block per set from
:mod:`tritonrepo.server.queue_policy`); each starts with a header saying it was generated from
the description, so an edit goes there and ``tritonrepo-new`` is run again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from builders.pipeline import model_configs
from builders.pipeline.config_writer import (
    ControlInput,
    EnsembleStep,
    InstanceGroup,
    ModelConfig,
    SequenceBatching,
    config_text,
)
from builders.pipeline.generated_files import (
    GENERATED,
    LINE_LENGTH,
    STEP_CLASS,
    first_fitting,
    header_comment,
    python_model,
)
from builders.pipeline.generated_files import test_module as suite_module
from builders.pipeline.model_configs import (
    CODE_ROOT,
    NO_TENSORRT,
    NO_TORCH_PROGRAM,
    CoreTensor,
    tensor_configs,
)
from tritonrepo.description import Pipeline, Step, Tensor
from tritonrepo_client.control.model_calls import CALLS_PARAMETER
from tritonrepo_client.model_repository.dtypes import BY_NAME

__all__ = ["CODE_ROOT", "GENERATED", "LINE_LENGTH", "NO_TENSORRT", "NO_TORCH_PROGRAM",
           "STEP_CLASS", "CoreTensor"]  # fmt: skip
SESSION_CLASS = "tritonrepo.pipelines.session_step:SessionStep"
CONTROL_KINDS = {"start": "START", "end": "END", "ready": "READY", "corrid": "CORRID"}


def ensemble_config(
    pipeline: Pipeline, core_inputs: Sequence[CoreTensor], core_outputs: Sequence[CoreTensor],
    probe: str | None,
) -> str:  # fmt: skip
    """The ensemble's ``config.pbtxt``: request → preprocess → core → postprocess → response;
    ``probe`` (JSON, :mod:`tritonrepo_client.control.probe_declaration`) becomes its
    ``tritonrepo_probe`` parameter, ``[openai_embeddings]`` its
    ``tritonrepo_openai_embeddings``."""
    pre, post = pipeline.preprocess, pipeline.postprocess
    extras = [t.name for t in pre.outputs]

    def step(model: str, ins: Iterable[str], outs: Iterable[str]) -> EnsembleStep:
        return EnsembleStep(model, tuple((n, n) for n in ins), tuple((n, n) for n in outs))

    steps = (
        step(pre.model, [t.name for t in pipeline.inputs],
             [*[t.name for t in core_inputs], *extras]),
        step(pipeline.core.model, [t.name for t in core_inputs], [t.name for t in core_outputs]),
        step(post.model, [*[t.name for t in core_outputs], *extras],
             [t.name for t in pipeline.outputs]),
    )  # fmt: skip
    parameters = {"tritonrepo_probe": probe} if probe is not None else {}
    parameters |= pipeline.openai_parameter()
    parameters |= pipeline.canary_parameter()
    config = ModelConfig(
        name=pipeline.name,
        platform="ensemble",
        max_batch_size=pipeline.max_batch_size,
        inputs=tensor_configs(pipeline.inputs),
        outputs=tensor_configs(pipeline.outputs),
        ensemble_steps=steps,
        parameters=parameters,
        comment=header_comment(pipeline, pipeline.summary, pipeline.doc),
    )
    return config_text(config)


def step_config(
    pipeline: Pipeline, step: Step, inputs: Sequence[Tensor], outputs: Sequence[Tensor],
    config_set: str,
) -> str:  # fmt: skip
    """A Python-backend step's config for ``config_set`` (``default`` = ``config.pbtxt``)."""
    drift = pipeline.drift_parameter() if step is getattr(pipeline, "preprocess", None) else {}
    return model_configs.step_config(pipeline, step, inputs, outputs, config_set, drift)


def core_config(
    pipeline: Pipeline, inputs: Sequence[CoreTensor], outputs: Sequence[CoreTensor],
    config_set: str, tensorrt: bool = True,
) -> str:  # fmt: skip
    """The core model's config for ``config_set``: ``default`` a TensorRT plan (profile 0 from
    ``max_batch_size``), ``cpu`` ONNX Runtime, ``torch_gpu`` a ``torch.export`` program when the
    description has that set (:data:`CORE_SETS`, from the table of config sets). ONNX Runtime on
    CPU instances stands in where nothing else can run: ``default`` when ``tensorrt`` is False
    (a graph TensorRT cannot parse), ``torch_gpu`` without a ``[model.torch_gpu]`` table (no
    program is built)."""
    return model_configs.core_config(pipeline, pipeline.core, inputs, outputs, config_set, tensorrt)


def session_config(
    pipeline: Pipeline, core_inputs: Sequence[CoreTensor], core_outputs: Sequence[CoreTensor],
    probe: str | None,
) -> str:  # fmt: skip
    """The session model's ``config.pbtxt`` (a stateful pipeline): Python backend,
    ``sequence_batching`` (Oldest strategy, the description's idle timeout and controls) and the
    parameters of :class:`tritonrepo.pipelines.session_step.SessionStep`."""
    sequence, session = pipeline.sequence, pipeline.session
    assert sequence is not None and session is not None
    controls = tuple(
        ControlInput(name, CONTROL_KINDS[key]) for key, name in sequence.controls.items() if name
    )
    step_outputs = [*(c.as_tensor() for c in core_inputs), *pipeline.preprocess.outputs]
    core_batch = min(
        d.max_batch_size or pipeline.max_batch_size for d in pipeline.core.deployments.values()
    )
    parameters = {
        "step": session.step,
        "postprocess": pipeline.postprocess.function or "",
        "code_root": CODE_ROOT,
        "core_model": pipeline.core.model,
        "core_inputs": ",".join(c.name for c in core_inputs),
        "core_outputs": ",".join(c.name for c in core_outputs),
        "core_max_batch_size": str(core_batch),
        "step_outputs": json.dumps(
            [
                {
                    "name": t.name,
                    "data_type": BY_NAME[t.dtype].config_name,
                    "dims": list(t.dims),
                }
                for t in step_outputs
            ],
            separators=(",", ":"),
        ),
        "max_sessions": str(sequence.max_sessions),
        "controls": f"{sequence.controls['start']},{sequence.controls['end']}",
        CALLS_PARAMETER: pipeline.core.model,
    }
    if probe is not None:
        parameters["tritonrepo_probe"] = probe
    batching = SequenceBatching(
        sequence.idle_timeout_us,
        controls,
        sequence.max_candidate_sequences,
        sequence.max_queue_delay_us,
        note=SESSION_NOTE,
    )
    config = ModelConfig(
        name=session.model,
        backend="python",
        max_batch_size=pipeline.max_batch_size,
        inputs=tensor_configs(pipeline.inputs),
        outputs=tensor_configs(pipeline.outputs, labels=True),
        instance_group=InstanceGroup(session.instances, "KIND_CPU"),
        sequence_batching=batching,
        parameters=parameters,
        comment=header_comment(pipeline, pipeline.summary, session.doc or pipeline.doc),
    )
    return config_text(config)


SESSION_NOTE = (
    "One event per request; each instance keeps its own sessions (Triton routes every\n"
    "request of a sequence to one instance). Oldest strategy: up to\n"
    "max_candidate_sequences open sessions per instance, batched across sessions."
)


def model_py(pipeline: Pipeline, step: Step | None, number: int, summary: str) -> str:
    """The step's 7-line ``model.py``: the Python backend's ``TritonPythonModel`` as a
    subclass of the step class (``FunctionStep`` for a function; ``SessionStep`` for the
    session model of a stateful pipeline, ``step`` None)."""
    if step is None:
        assert pipeline.session is not None
        module, _, cls = SESSION_CLASS.partition(":")
        logic, what = pipeline.session.step, "session model"
    else:
        module, _, cls = (step.step or STEP_CLASS).partition(":")
        logic, what = step.function or step.step, f"step {number}"
    candidates = (
        f'"""{pipeline.name} {what}: {summary} (logic: {logic})."""',
        f'"""{pipeline.name} {what}: {summary}."""',
        f'"""{pipeline.name} {what} (logic: {logic})."""',
        f'"""{pipeline.name} {what}."""',
    )
    return python_model(first_fitting(candidates), f"{module}:{cls}")


def test_module(pipeline: Pipeline) -> str:
    """``tests/pipelines/test_<name>.py``: the shared suite (:mod:`tests.pipeline_suite`) bound
    to this description."""
    suite = "session_suite:SessionSuite" if pipeline.stateful else "pipeline_suite:PipelineSuite"
    return suite_module(pipeline, suite)


def step_view(pipeline: Pipeline, tensors: Sequence[CoreTensor]) -> list[Tensor]:
    """The core model's tensors as the steps next to it declare them: as the core's, or, in a
    pipeline that does not batch (``max_batch_size = 0``: one request = one item, e.g. one
    user) around a core that does, with a leading ``-1``: a step hands the core all rows of its
    request at once (``[n, *dims]``), which reaches the core as one request of batch n."""
    core_batch = pipeline.core.deployments["default"].max_batch_size
    rows = pipeline.max_batch_size == 0 and bool(core_batch)
    return [Tensor(t.name, t.dtype, ((-1,) if rows else ()) + t.dims) for t in tensors]
