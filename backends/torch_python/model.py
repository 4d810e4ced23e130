"""Python-based backend ``torch_python``: serves ``<version>/<default_model_filename>`` (a
``torch.export`` program, ``model.pt2``) with PyTorch on the instance's GPU (or CPU).

Select it with ``backend: "torch_python"`` in a model config (the ``torch_gpu`` config set, e.g.
``model_repository/text_embedding_encoder/configs/torch_gpu.pbtxt``); build the program on the
serving host with ``make artifacts-gpu``. Inputs and outputs are the config's, matched by name,
and travel through DLPack (:class:`tritonrepo.step.python_step.PythonStep`). Config parameters:

* ``sequence_axis_inputs``: comma-separated inputs whose axis 1 is a padded sequence; requests
  of different lengths are padded to the longest
  (:class:`tritonrepo.runners.torch_runner.TorchRunner`);
* ``sequence_axis_outputs``: outputs whose axis 1 is that sequence, cut back per request;
* ``output_device``: ``cpu`` copies the batch's outputs to the host once (default: the
  instance's device);
* ``cuda_graph_rows`` and ``cuda_graph_positions``: comma-separated bucket sizes of the batch
  and sequence axes; when set on a GPU instance, CUDA graphs are captured over that grid at load
  (:mod:`tritonrepo.runners.cuda_graphs`). A capture that fails leaves the model eager, with a
  warning in the server log.

The program's largest batch comes from its build metadata (``torch_metadata.json``), which is
also checked against this host's PyTorch version before anything loads.
"""

from tritonrepo.runners.cuda_graphs import grid_from_parameters
from tritonrepo.runners.torch_runner import (
    TorchRunner,
    check_program_metadata,
    graph_examples,
    torch_dtype,
)
from tritonrepo.step.python_step import PythonStep


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


class TritonPythonModel(PythonStep):
    """A ``torch.export`` program; inputs and outputs are the config's, matched by name."""

    tensor_library = "torch"

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
        self.runner = TorchRunner(
            model_file,
            device=self.device,
            output_names=[out["name"] for out in outputs],
            output_dtypes={out["name"]: torch_dtype(out["data_type"]) for out in outputs},
            max_batch=int(metadata["max_batch"]),
            sequence_axis_inputs=_names(self.parameter("sequence_axis_inputs", "")),
            sequence_axis_outputs=_names(self.parameter("sequence_axis_outputs", "")),
            output_device=self.parameter("output_device", "") or None,
        )
        rows = self.parameter("cuda_graph_rows", "")
        if rows and self.device != "cpu":
            grid = grid_from_parameters(rows, self.parameter("cuda_graph_positions", ""))
            try:
                count = self.runner.capture_graphs(grid, graph_examples(self.model_config))
                self.pb_utils.Logger.log_info(f"{self.model_name}: {count} CUDA graphs captured")
            except RuntimeError as exc:
                self.runner.graphs = None
                self.pb_utils.Logger.log_warn(f"{self.model_name}: CUDA graphs off: {exc}")

    def run(self, items):
        return self.runner.run_batch(items)
