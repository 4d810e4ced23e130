"""The model of the Python-based backend ``torch_python``: a ``torch.export`` program
(``<version>/<default_model_filename>``, ``model.pt2``) run by PyTorch on the instance's GPU (or
CPU) for a Triton dynamic batch.

``backends/torch_python/model.py`` is a one-line subclass, selected with
``backend: "torch_python"`` in a model config (the ``torch_gpu`` config set, e.g.
``model_repository/text_embedding_encoder/configs/torch_gpu.pbtxt``); a one-step GPU pipeline
model runs it in its own process (:mod:`tritonrepo.pipelines.chained_step`). Build the program on
the serving host with ``make artifacts-gpu``. Inputs and outputs are the config's, matched by
name, and travel through DLPack (:class:`tritonrepo.step.python_step.PythonStep`). Config
parameters: :attr:`TorchProgramStep.PARAMETERS`. With ``cuda_graph_rows`` set on a GPU instance,
CUDA graphs are captured over the grid at load (:mod:`tritonrepo.runners.cuda_graphs`); a capture
that fails leaves the model eager, with a warning in the server log.

The program's largest batch comes from its build metadata (``torch_metadata.json``), which is
also checked against this host's PyTorch version before anything loads.
"""

from __future__ import annotations

from typing import Any

from tritonrepo.runners.cuda_graphs import Grid
from tritonrepo.runners.torch_runner import (
    TorchRunner,
    check_program_metadata,
    graph_examples,
    torch_dtype,
)
from tritonrepo.step.parameters import Parameter
from tritonrepo.step.python_step import PythonStep


class TorchProgramStep(PythonStep):
    """A ``torch.export`` program; inputs and outputs are the config's, matched by name
    (``torch`` tensors ``[batch_i, ...]`` per request, :meth:`TorchRunner.run_batch`).

    Raises (from ``initialize``): FileNotFoundError (program or metadata not built),
    RuntimeError (exported with another PyTorch), ParameterError (a parameter does not fit).
    """

    tensor_library = "torch"
    PARAMETERS = (
        Parameter(
            "sequence_axis_inputs",
            "names",
            (),
            "inputs",
            "inputs whose axis 1 is a padded sequence; requests are padded to the longest",
        ),
        Parameter(
            "sequence_axis_outputs",
            "names",
            (),
            "outputs",
            "outputs whose axis 1 is that sequence, cut back per request",
        ),
        Parameter(
            "output_device",
            "str",
            None,
            "torch device",
            "where a batch's outputs go, once ('cpu': one host copy); default the instance's",
        ),
        Parameter(
            "cuda_graph_rows",
            "sizes",
            (),
            "rows",
            "batch-axis buckets of the CUDA graphs captured at load; empty = no graphs",
        ),
        Parameter(
            "cuda_graph_positions",
            "sizes",
            (),
            "positions",
            "sequence-axis buckets of the CUDA graphs (models with a sequence axis)",
        ),
    )

    def setup(self) -> None:
        if self.device != "cpu":
            # The host side of a GPU instance only joins and copies tensors: one intra-op
            # thread. PyTorch's default (one per core, spinning after each parallel region)
            # took the cores of the other stubs on the H200 (image_preprocess compute 5.9 ms
            # per request at c=1, 27 ms at c=16 beside two classifier instances).
            import torch

            torch.set_num_threads(1)
        model_file = self.artifact(self.model_config.get("default_model_filename") or "model.pt2")
        metadata = check_program_metadata(model_file)
        outputs = self.model_config["output"]
        settings = self.settings
        self.runner = TorchRunner(
            model_file,
            device=self.device,
            output_names=[out["name"] for out in outputs],
            output_dtypes={out["name"]: torch_dtype(out["data_type"]) for out in outputs},
            max_batch=int(metadata["max_batch"]),
            sequence_axis_inputs=list(settings["sequence_axis_inputs"]),
            sequence_axis_outputs=list(settings["sequence_axis_outputs"]),
            output_device=settings["output_device"],
        )
        if settings["cuda_graph_rows"] and self.device != "cpu":
            grid = Grid(settings["cuda_graph_rows"], settings["cuda_graph_positions"])
            try:
                count = self.runner.capture_graphs(grid, graph_examples(self.model_config))
                self.pb_utils.Logger.log_info(f"{self.model_name}: {count} CUDA graphs captured")
            except RuntimeError as exc:
                self.runner.graphs = None
                self.pb_utils.Logger.log_warn(f"{self.model_name}: CUDA graphs off: {exc}")

    def run(self, items: list[Any]) -> list[Any]:
        return self.runner.run_batch(items)
