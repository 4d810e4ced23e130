"""The model configs several kinds of description share, as data for
:func:`builders.pipeline.config_writer.config_text` (no I/O here): a core model's config in each
config set (:func:`core_config`), a Python-backend step's config (:func:`step_config`), and the
tensors as configs declare them (:class:`CoreTensor`, :func:`tensor_configs`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from builders.pipeline.config_writer import (
    ControlInput,
    DynamicBatching,
    InstanceGroup,
    ModelConfig,
    SequenceBatching,
    TensorConfig,
    config_text,
)
from builders.pipeline.generated_files import header_comment
from tritonrepo.description import Core, Header, Step, Tensor
from tritonrepo.description.schema import SequenceSpec
from tritonrepo.server.queue_policy import PLAIN, priority_policy
from tritonrepo_client.control.model_calls import CALLS_PARAMETER
from tritonrepo_format.config_sets import (
    CONFIG_SETS,
    DEFAULT_SET,
    PLATFORMS,
    TORCH_AOTI_SET,
    TORCH_GPU_SET,
)

CODE_ROOT = "../.."  # from a model's folder to the checkout root: pipelines.<name> imports
CONTROL_KINDS = {"start": "START", "end": "END", "ready": "READY", "corrid": "CORRID"}


@dataclass(frozen=True)
class CoreTensor:
    """A core-model tensor as its configs declare it: ``dims`` without the batch dim;
    ``reshape`` True for a graph tensor with the batch dim only (declared ``[1]``, reshaped to
    ``[]`` for the model: Triton's ``reshape``)."""

    name: str
    dtype: str
    dims: tuple[int, ...]
    reshape: bool = False

    def as_tensor(self) -> Tensor:
        """The tensor as the steps next to the core model see it."""
        return Tensor(self.name, self.dtype, self.dims)


def tensor_configs(
    tensors: Iterable[Tensor | CoreTensor], labels: bool = False, ragged: Collection[str] = ()
) -> tuple[TensorConfig, ...]:
    """The ``input``/``output`` entries of ``tensors``: a core tensor's ``reshape``, a
    description tensor's ``optional`` and (with ``labels``) ``label_filename``; ``ragged``
    names the inputs declared ``allow_ragged_batch``."""
    out = []
    for t in tensors:
        core = isinstance(t, CoreTensor)
        out.append(
            TensorConfig(
                t.name,
                t.dtype,
                t.dims,
                reshape=() if core and t.reshape else None,
                allow_ragged_batch=t.name in ragged,
                optional=not core and t.optional,
                label_filename=t.label_filename if labels and not core else None,
            )
        )
    return tuple(out)


def step_config(
    header: Header,
    step: Step,
    inputs: Sequence[Tensor],
    outputs: Sequence[Tensor],
    config_set: str,
    extra_parameters: Mapping[str, str] | None = None,
) -> str:
    """A Python-backend step's config for ``config_set`` (``default`` = ``config.pbtxt``): CPU
    instances, Triton's plain queue; a function step names its function and the code root, a
    step that ``calls`` models names them (``tritonrepo_calls``); ``extra_parameters`` last
    (the drift counter of the step that receives the requests)."""
    deployment = step.deployments[config_set]
    parameters = dict(deployment.parameters)
    if step.function is not None:
        parameters = {"function": step.function, "code_root": CODE_ROOT, **parameters}
    if step.calls:
        parameters[CALLS_PARAMETER] = ",".join(step.calls)
    parameters |= extra_parameters or {}
    max_batch_size = deployment.max_batch_size or header.max_batch_size
    batching = DynamicBatching(deployment.max_queue_delay_us, deployment.preferred_batch_sizes)
    config = ModelConfig(
        name=step.model,
        backend="python",
        max_batch_size=max_batch_size,
        inputs=tensor_configs(inputs, ragged=deployment.ragged_inputs),
        outputs=tensor_configs(outputs, labels=True),
        instance_group=InstanceGroup(deployment.instances, "KIND_CPU"),
        dynamic_batching=batching if max_batch_size else None,  # 0: nothing to batch
        parameters=parameters,
        comment=header_comment(header, deployment.doc or step.doc),
    )
    return config_text(config)


NO_TENSORRT = (
    "TensorRT cannot parse this graph (ai.onnx.ml operators), so config.pbtxt runs it with\n"
    "ONNX Runtime on CPU instances too, like configs/cpu.pbtxt."
)
NO_TORCH_PROGRAM = (
    "No torch.export program is built for this model, so the torch_gpu set runs its ONNX\n"
    "model with ONNX Runtime on CPU instances, like configs/cpu.pbtxt: switching a server to\n"
    "that set keeps this pipeline serving."
)


TORCH_AOTI = (
    "NVIDIA's container (r26.05 and later): Triton's PyTorch backend runs 1/model.pt2, the\n"
    "AOTInductor package of the program the torch_gpu set runs (python -m\n"
    "builders.torch_programs.export --format aotinductor, with the PyTorch of the serving\n"
    "image: a package is tied to its PyTorch version). The backend feeds the inputs by name\n"
    "(the program's forward arguments) and returns the outputs in this config's order\n"
    "(tritonrepo_format/torch_aoti.py checks both).\n"
    "Instances and batching as in configs/torch_gpu.pbtxt."
)


def core_sets(core: Core) -> list[str]:
    """The config sets a core model gets: its own; ``torch_gpu`` for a core built from an
    ONNX graph without one (ONNX Runtime stands in: :data:`NO_TORCH_PROGRAM`); ``torch_aoti``
    for a core with a program (a ``torch_gpu`` set of its own): the same package in NVIDIA's
    container (:data:`TORCH_AOTI`)."""
    sets = [*core.deployments]
    if core.builder is None and TORCH_GPU_SET not in sets:
        sets.append(TORCH_GPU_SET)
    if TORCH_GPU_SET in core.deployments and TORCH_AOTI_SET not in sets:
        sets.append(TORCH_AOTI_SET)
    return sets


def core_config(
    header: Header,
    core: Core,
    inputs: Sequence[CoreTensor],
    outputs: Sequence[CoreTensor],
    config_set: str,
    tensorrt: bool = True,
    no_tensorrt: str = NO_TENSORRT,
    implicit_state: SequenceBatching | None = None,
) -> str:
    """The core model's config for ``config_set``: ``default`` a TensorRT plan (profile 0 from
    ``max_batch_size``), ``cpu`` ONNX Runtime, ``torch_gpu`` a compiled PyTorch program when the
    description has that set, ``torch_aoti`` the same program in NVIDIA's container (the
    ``torch_gpu`` set's instances and batching; the table of config sets says each set's
    runtime and file). ONNX
    Runtime on CPU instances stands in where nothing else can run: ``default`` when ``tensorrt``
    is False (the comment says why: ``no_tensorrt``), ``torch_gpu`` without a
    ``[model.torch_gpu]`` table (no program is built: :data:`NO_TORCH_PROGRAM`). The queue has
    priority levels where the set's deployment asks for them. ``implicit_state``: the sequence
    batcher of a TensorRT plan that keeps the session's state itself (Triton's implicit
    state), in place of the dynamic batcher; ``inputs``/``outputs`` are then without the state
    tensors."""
    note = ""
    if config_set == DEFAULT_SET and not tensorrt:
        note = no_tensorrt
    elif config_set == TORCH_GPU_SET and TORCH_GPU_SET not in core.deployments:
        note = NO_TORCH_PROGRAM
    runtime_set = "cpu" if note else config_set  # the set whose runtime runs the model
    runtime = CONFIG_SETS[runtime_set]
    own = core.deployments.get(config_set)
    aoti = config_set == TORCH_AOTI_SET
    if aoti and own is None:  # the torch_gpu set's instances and batching, none of its
        own = replace(core.deployments[TORCH_GPU_SET], parameters={}, doc=TORCH_AOTI,
                      ragged_inputs=())  # fmt: skip  # Python runner's parameters or ragged joins
    deployment = core.deployments["cpu"] if own is None else own
    levels = deployment.priority_levels
    policy = priority_policy(config_set if config_set != DEFAULT_SET else None) if levels else PLAIN
    plan = runtime.core_runtime in PLATFORMS  # a platform; the others are backends
    profiles = ("0",) if runtime_set == DEFAULT_SET else ()
    batching = DynamicBatching(
        deployment.max_queue_delay_us, deployment.preferred_batch_sizes, policy
    )
    config = ModelConfig(
        name=core.model,
        platform=runtime.core_runtime if plan else None,
        backend=None if plan else runtime.core_runtime,
        default_model_filename=runtime.core_file,
        max_batch_size=deployment.max_batch_size or header.max_batch_size,
        versions=core.versions,
        inputs=tensor_configs(inputs, ragged=deployment.ragged_inputs),
        outputs=tensor_configs(outputs),
        instance_group=InstanceGroup(
            deployment.instances, f"KIND_{runtime.device.upper()}", profiles
        ),
        dynamic_batching=None if implicit_state and plan else batching,
        sequence_batching=implicit_state if plan else None,
        parameters=core.deployments["cpu"].parameters if note else deployment.parameters,
        comment=header_comment(header, "" if own is None else deployment.doc, note),
    )
    return config_text(config)


INT8_VERSION = 2  # the version folder of an INT8 build (``[model] int8 = true``)


def version_folders(core: Core) -> list[int]:
    """The core's version folders, sorted: its served ``versions`` and, with ``int8``, the
    INT8 build's (:data:`INT8_VERSION`, staged for a rollout)."""
    return sorted({*core.versions, *((INT8_VERSION,) if core.int8 else ())})


def sequence_controls(sequence: SequenceSpec) -> tuple[ControlInput, ...]:
    """The sequence batcher's control inputs: the ``[sequence.controls]`` that are declared."""
    return tuple(
        ControlInput(name, CONTROL_KINDS[key]) for key, name in sequence.controls.items() if name
    )
