"""Run a PyTorch program (``model.pt2``) on one device for a Triton dynamic batch.

Used by the Python-based backend ``backends/torch_python`` (the ``torch_gpu`` config set: a GPU
host without NVIDIA's container, so without TensorRT). The program is built on the host that
serves it by ``builders/torch_programs/export.py``, in one of two formats (:func:`program_format`):

* ``torch.export``: the exported program itself (``torch.export.save``), run by PyTorch's eager
  kernels; what the builder writes by default.
* ``aotinductor``: an AOTInductor package (``torch._inductor.aoti_compile_and_package`` of the
  exported program: its kernels compiled and fused ahead of time; the builder's ``--format
  aotinductor``). The same file is what Triton's PyTorch backend serves with ``platform:
  "torch_aoti"`` in NVIDIA's container (r26.05 and later).

Either records the device and the PyTorch version it was built with, as a TensorRT plan records
its GPU and TensorRT version.

Data moves per batch, not per request. Inputs arrive as ``torch`` tensors (through DLPack);
host inputs are joined on the host and copied to the device once per batch. The outputs of the
whole batch go to ``output_device`` at once (the host: one device-to-host copy per batch, and
each request's rows are host tensors, so no per-request GPU tensor crosses into the next
Python step; or the device), and leave through DLPack.

A dynamic batch runs as few forward passes as possible: the requests are joined along the batch
axis (padded along the sequence axis when ``sequence_axis_inputs`` are given, as the tokenizer
pads every batch to its own longest text) and cut into chunks of at most ``max_batch`` rows, the
largest batch the program was exported for. On a GPU one padded pass over the whole batch costs
less than sorting rows by length on the host (the CPU backend's packing). With ``graphs``
(:mod:`tritonrepo.runners.cuda_graphs`), a chunk that fits the captured grid replays a CUDA graph
instead of running the program eagerly.
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from tritonrepo.runners.cuda_graphs import GraphedProgram, Grid
from tritonrepo.step.dtypes import TORCH_DTYPE_NAMES
from tritonrepo.step.errors import InvalidRequest, check_each

Feed = dict[str, torch.Tensor]

METADATA_FILE = (
    "torch_metadata.json"  # written by builders/torch_programs/export.py next to model.pt2
)
AOTI_FORMAT, EXPORT_FORMAT = "aotinductor", "torch.export"
# An AOTInductor package holds its compiled model under <archive>/data/aotinductor/ (the layout
# of torch._inductor.package); an exported program's archive has no such folder.
AOTI_MEMBER = "/data/aotinductor/"


def program_format(model_file: str | Path) -> str:
    """:data:`AOTI_FORMAT` for an AOTInductor package, else :data:`EXPORT_FORMAT`.

    Raises:
        FileNotFoundError: no such file.
        zipfile.BadZipFile: not a ``.pt2`` archive.
    """
    with zipfile.ZipFile(model_file) as archive:
        names = archive.namelist()
    return AOTI_FORMAT if any(AOTI_MEMBER in name for name in names) else EXPORT_FORMAT


def load_compiled(
    model_file: str | Path, device: torch.device, single_threaded: bool = True
) -> Callable[..., list[torch.Tensor]]:
    """An AOTInductor package loaded for ``device``: called with the inputs in the program's
    order, it returns the list of its outputs.

    ``single_threaded``: one caller at a time (each Triton instance runs one batch at a time),
    without the package's thread synchronisation, which CUDA graph capture cannot have
    (PyTorch's ``aoti_load_package(run_single_threaded=...)``).
    """
    index = device.index if device.type == "cuda" and device.index is not None else -1
    return torch._inductor.aoti_load_package(
        str(model_file), run_single_threaded=single_threaded, device_index=index
    )


def check_program_metadata(model_file: Path) -> dict[str, Any]:
    """Read the build metadata next to ``model_file`` and check it fits this host.

    Returns:
        The metadata (``torch_version``, ``device_name``, ``compute_capability``, ``precision``,
        ``max_batch``, ...).

    Raises:
        FileNotFoundError: no metadata next to the program.
        RuntimeError: the program was exported with another PyTorch version than this one;
            the message says how to rebuild it.
    """
    path = model_file.parent / METADATA_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; build with `make artifacts-gpu` on this host")
    metadata = json.loads(path.read_text())
    if metadata.get("torch_version") != torch.__version__:
        raise RuntimeError(
            f"{model_file} was exported with PyTorch {metadata.get('torch_version')} and this "
            f"host runs {torch.__version__}; rebuild it here with `make artifacts-gpu`"
        )
    return metadata


class TorchRunner:
    """An exported program on one device that serves batches of requests.

    Args:
        model_file: the ``.pt2`` file, an AOTInductor package or an exported program
            (:func:`program_format`); a package's input order is the ``inputs`` of the build
            metadata next to it (:data:`METADATA_FILE`).
        device: ``"cuda:N"`` or ``"cpu"``; an exported program is moved there if it was
            exported for another device (``torch.export.passes.move_to_device_pass``); a
            package runs on the device type it was compiled for.
        output_names: the program's outputs, in order (its forward returns a tuple or one
            tensor).
        output_dtypes: per output, the dtype to return (the config's ``data_type``).
        max_batch: most rows per forward pass (the exported batch range's max).
        sequence_axis_inputs: inputs whose axis 1 is a padded sequence (e.g. ``input_ids``,
            ``attention_mask``); requests of different lengths are zero-padded to the longest.
        sequence_axis_outputs: outputs whose axis 1 follows the inputs' sequence axis; each
            request's is cut back to its own length. Other outputs are returned whole.
        output_device: where the outputs go, once per batch (default: ``device``).
    """

    def __init__(
        self,
        model_file: str | Path,
        device: str,
        output_names: Sequence[str],
        output_dtypes: dict[str, torch.dtype],
        max_batch: int,
        sequence_axis_inputs: Sequence[str] = (),
        sequence_axis_outputs: Sequence[str] = (),
        output_device: str | None = None,
    ) -> None:
        self.device = torch.device(device)
        self.format = program_format(model_file)
        if self.format == AOTI_FORMAT:
            compiled = load_compiled(model_file, self.device)
            self.module = lambda *args: tuple(compiled(*args))
            metadata = json.loads((Path(model_file).parent / METADATA_FILE).read_text())
            self.input_names = list(metadata["inputs"])
        else:
            program = torch.export.load(str(model_file))
            if _program_device(program) != self.device:
                program = torch.export.passes.move_to_device_pass(program, self.device)
            self.module = program.module()
            self.input_names = [
                spec.arg.name
                for spec in program.graph_signature.input_specs
                if spec.kind.name == "USER_INPUT"
            ]
        self.output_names = list(output_names)
        self.output_dtypes = output_dtypes
        self.max_batch = max_batch
        self.sequence_axis_inputs = set(sequence_axis_inputs)
        self.sequence_axis_outputs = set(sequence_axis_outputs)
        self.output_device = torch.device(output_device) if output_device else self.device
        self.graphs: GraphedProgram | None = None

    def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The program's forward on positional inputs, always as a tuple of outputs."""
        out = self.module(*args)
        return out if isinstance(out, tuple) else (out,)

    @torch.inference_mode()
    def capture_graphs(self, grid: Grid, examples: Feed) -> int:
        """Capture CUDA graphs of the program over ``grid`` (rows clamped to ``max_batch``);
        later chunks that fit a bucket replay its graph (:mod:`tritonrepo.runners.cuda_graphs`).

        Args:
            grid: the buckets.
            examples: per input, a tensor whose dtype and trailing shape the buffers take.

        Returns:
            The number of graphs captured.

        Raises:
            RuntimeError: the device is not CUDA, or a capture failed (the runner stays eager).
        """
        if self.device.type != "cuda":
            raise RuntimeError(f"CUDA graphs need a CUDA device, not {self.device}")
        rows = tuple(r for r in grid.rows if r <= self.max_batch)
        self.graphs = GraphedProgram(
            self.forward,
            self.input_names,
            [n for n in self.input_names if n in self.sequence_axis_inputs],
            {n: t.to(self.device) for n, t in examples.items()},
            Grid(rows, grid.positions),
        )
        return len(self.graphs.graphs)

    @torch.inference_mode()
    def run_batch(self, requests: Sequence[Feed]) -> list[Feed | Exception]:
        """Run all requests as few forward passes of at most ``max_batch`` rows.

        Args:
            requests: per request, ``{input name: tensor [batch_i, ...]}`` on any device.

        Returns:
            Per request, ``{output name: tensor [batch_i, ...]}`` on ``output_device`` (sequence
            outputs cut to the request's own length), or the exception its forward pass raised
            (InvalidRequest for missing inputs or inputs whose shapes disagree).
        """
        results, valid = check_each(requests, self._check)
        if not valid:
            return results  # type: ignore[return-value]
        feed = {
            name: self._join([requests[i][name] for i in valid], name) for name in self.input_names
        }
        try:
            outputs = self._forward(feed)
        except Exception as exc:  # e.g. CUDA out of memory: those requests fail, not the model
            for i in valid:
                results[i] = exc
            return results  # type: ignore[return-value]
        start = 0
        for i in valid:
            first = requests[i][self.input_names[0]]
            stop = start + first.shape[0]
            length = first.shape[1] if first.ndim > 1 else None
            results[i] = {
                name: out[start:stop, :length]
                if name in self.sequence_axis_outputs
                else out[start:stop]
                for name, out in outputs.items()
            }
            start = stop
        return results  # type: ignore[return-value]

    def _check(self, inputs: Feed) -> None:
        missing = [n for n in self.input_names if n not in inputs]
        if missing:
            raise InvalidRequest(f"missing inputs {missing}")
        shapes = {n: tuple(inputs[n].shape[:2]) for n in self.sequence_axis_inputs}
        if len(set(shapes.values())) > 1:
            raise InvalidRequest(f"inputs must share [batch, seq]; got {shapes}")

    def _join(self, tensors: list[torch.Tensor], name: str) -> torch.Tensor:
        """One tensor of all requests' ``name`` on ``device``: joined where the tensors are
        (host inputs on the host), then copied to the device once."""
        if any(t.device != tensors[0].device for t in tensors):
            tensors = [t.to(self.device) for t in tensors]
        if name in self.sequence_axis_inputs:
            longest = max(t.shape[1] for t in tensors)
            tensors = [torch.nn.functional.pad(t, (0, longest - t.shape[1])) for t in tensors]
        joined = tensors[0] if len(tensors) == 1 else torch.cat(tensors)
        return joined.to(self.device)

    def _forward(self, feed: Feed) -> Feed:
        rows = next(iter(feed.values())).shape[0]
        chunks: list[tuple[torch.Tensor, ...]] = []
        for start in range(0, rows, self.max_batch):
            part = {n: feed[n][start : start + self.max_batch] for n in self.input_names}
            out = self.graphs(part) if self.graphs is not None else None
            if out is None:
                # positional, in the program's input order (it was exported with positional args)
                out = self.forward(*[part[n] for n in self.input_names])
            chunks.append(out)
        outputs = {}
        for j, name in enumerate(self.output_names):
            joined = torch.cat([c[j] for c in chunks]) if len(chunks) > 1 else chunks[0][j]
            joined = joined.to(self.output_dtypes[name])
            if joined.device == self.output_device and self.graphs is not None:
                joined = joined.clone()  # a graph's static output is reused by the next replay
            outputs[name] = joined.to(self.output_device)
        return outputs


def _program_device(program: torch.export.ExportedProgram) -> torch.device | None:
    """The device of the program's first parameter or buffer (None if it has neither)."""
    for tensor in list(program.state_dict.values()) + list(program.constants.values()):
        if isinstance(tensor, torch.Tensor):
            return tensor.device
    return None


def torch_dtype(config_type: str) -> torch.dtype:
    """The ``torch`` dtype of a model-config ``data_type`` (``"TYPE_FP16"`` → ``torch.float16``).

    Raises:
        ValueError: a type with no ``torch`` counterpart here (e.g. ``TYPE_STRING``).
    """
    if config_type not in TORCH_DTYPE_NAMES:
        raise ValueError(f"no torch dtype for {config_type}; known: {sorted(TORCH_DTYPE_NAMES)}")
    return getattr(torch, TORCH_DTYPE_NAMES[config_type])


def graph_examples(model_config: dict) -> Feed:
    """Per config input, a zero tensor ``[1, *dims]`` (each ``-1`` dim as 1) of its dtype: the
    dtypes and trailing shapes :meth:`TorchRunner.capture_graphs` sizes its buffers from.

    Raises:
        ValueError: an input type with no ``torch`` counterpart.
    """
    return {
        spec["name"]: torch.zeros(
            (1, *[max(int(d), 1) for d in spec.get("dims", [])]),
            dtype=torch_dtype(spec["data_type"]),
        )
        for spec in model_config["input"]
    }
