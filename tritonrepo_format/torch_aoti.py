"""What Triton's PyTorch backend requires of a ``platform: "torch_aoti"`` config (NVIDIA's
container r26.05 and later), checked offline, without the backend.

The rules are the backend's own, read from its source (``triton-inference-server/
pytorch_backend``, ``src/pt2/inductor_model_instance.cc``: ``ValidateInputs``,
``ValidateOutputs``, ``GetNamingConvention``; ``src/libtorch_utils.cc``:
``ModelConfigDataTypeToTorchType``):

* the config declares as many inputs as the package's call takes (``batch_input``, sequence
  controls and sequence states count as inputs; none is declared here);
* inputs are matched by name when every input's name is an argument of the program's
  ``forward`` (any order), else by a ``<name>__<index>`` suffix on every name, else by the
  config's order;
* outputs are matched by a ``<name>__<index>`` suffix on every name, else by the config's
  order: the i-th output of the config is the program's i-th output;
* every tensor's data type has a PyTorch counterpart (``BOOL``, ``UINT8``, ``INT8``, ``INT16``,
  ``INT32``, ``INT64``, ``FP16``, ``FP32``, ``FP64``); strings (``TYPE_STRING``) only with one
  dimension, which no compiled program here takes;
* the package is the version folder's ``model.pt2`` (``kPyTorchAotiFilename`` of Triton core).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from tritonclient.grpc import model_config_pb2 as mc

from tritonrepo_format.configs import ModelConfig

PLATFORM = "torch_aoti"
PACKAGE_FILE = "model.pt2"
TORCH_TYPES = frozenset(
    f"TYPE_{t}"
    for t in ("BOOL", "UINT8", "INT8", "INT16", "INT32", "INT64", "FP16", "FP32", "FP64")
)
NAMED_INDEX = re.compile(r"__(\d+)$")  # the backend's <name>__<index> (digits after "__")


def input_order(config: ModelConfig, program_inputs: Sequence[str]) -> list[str] | None:
    """The program argument each config input feeds, in the config's order, by the backend's
    rule (module docstring); None when the inputs are matched by the config's order and their
    names say nothing (the caller compares the orders)."""
    names = [t.name for t in config.input]
    if all(n in program_inputs for n in names):
        return names
    if all(NAMED_INDEX.search(n) for n in names):
        indices = [int(NAMED_INDEX.search(n).group(1)) for n in names]  # type: ignore[union-attr]
        return [program_inputs[i] if i < len(program_inputs) else f"#{i}" for i in indices]
    return None


def problems(
    config: ModelConfig, program_inputs: Sequence[str], program_outputs: Sequence[str]
) -> list[str]:
    """What the PyTorch backend would refuse, or feed wrongly, in ``config`` for a package whose
    ``forward`` takes ``program_inputs`` (in order) and returns ``program_outputs`` (in order;
    the names the program's builder gave them, which the config's outputs must follow).

    Returns:
        One line per problem; empty when the backend would load the model and feed every
        tensor to the program's argument or output of the same name.
    """
    found = []
    if config.platform != PLATFORM:
        found.append(f"platform is {config.platform!r}, not {PLATFORM!r}")
    if config.default_model_filename not in ("", PACKAGE_FILE):
        found.append(
            f"default_model_filename {config.default_model_filename!r}: the backend loads the "
            f"package named {PACKAGE_FILE!r}"
        )
    extra = len(config.batch_input) + len(config.sequence_batching.control_input)
    extra += len(config.sequence_batching.state)
    if extra:
        found.append(f"{extra} batch inputs, sequence controls or states: none is fed here")
    if len(config.input) != len(program_inputs):
        found.append(
            f"{len(config.input)} inputs in the config, {len(program_inputs)} in the program's "
            f"call {list(program_inputs)}: the backend refuses to load it"
        )
    else:
        fed = input_order(config, program_inputs) or list(program_inputs)
        for tensor, argument in zip(config.input, fed, strict=True):
            if tensor.name != argument and not NAMED_INDEX.search(tensor.name):
                found.append(f"input {tensor.name!r} would feed the program's {argument!r}")
    outputs = [t.name for t in config.output]
    if len(outputs) != len(program_outputs):
        found.append(f"{len(outputs)} outputs in the config, the program returns "
                     f"{len(program_outputs)} {list(program_outputs)}")  # fmt: skip
    elif not all(NAMED_INDEX.search(n) for n in outputs) and outputs != list(program_outputs):
        found.append(
            f"outputs {outputs} are read in the config's order; the program returns "
            f"{list(program_outputs)}"
        )
    for kind, tensors in (("input", config.input), ("output", config.output)):
        for tensor in tensors:
            name = mc.DataType.Name(tensor.data_type)
            if name not in TORCH_TYPES:
                found.append(f"{kind} {tensor.name!r}: {name} has no PyTorch type in the backend")
            if tensor.allow_ragged_batch if kind == "input" else False:
                found.append(f"input {tensor.name!r}: allow_ragged_batch (the backend would "
                             "join ragged rows flat)")  # fmt: skip
    return found
