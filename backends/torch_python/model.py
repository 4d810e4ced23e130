"""Python-based backend ``torch_python``: serves ``<version>/<default_model_filename>`` (a
``torch.export`` program, ``model.pt2``) with PyTorch on the instance's GPU (or CPU).

Select it with ``backend: "torch_python"`` in a model config (the ``torch_gpu`` config set, e.g.
``model_repository/text_embedding_encoder/configs/torch_gpu.pbtxt``); build the program on the
serving host with ``make artifacts-gpu``. Inputs and outputs are the config's, matched by name,
and travel through DLPack (:class:`tritonrepo.triton_step.PythonStep`). Config parameters:

* ``sequence_axis_inputs``: comma-separated inputs whose axis 1 is a padded sequence; requests
  of different lengths are padded to the longest and the outputs cut back
  (:class:`tritonrepo.torch_runner.TorchRunner`).

The program's largest batch comes from its build metadata (``torch_metadata.json``), which is
also checked against this host's PyTorch version before anything loads.
"""

from tritonrepo.torch_runner import TorchRunner, check_program_metadata, torch_dtype
from tritonrepo.triton_step import PythonStep


class TritonPythonModel(PythonStep):
    """A ``torch.export`` program; inputs and outputs are the config's, matched by name."""

    tensor_library = "torch"

    def setup(self) -> None:
        model_file = self.artifact(self.model_config.get("default_model_filename") or "model.pt2")
        metadata = check_program_metadata(model_file)
        outputs = self.model_config["output"]
        sequence = self.parameter("sequence_axis_inputs", "")
        self.runner = TorchRunner(
            model_file,
            device=self.device,
            output_names=[out["name"] for out in outputs],
            output_dtypes={out["name"]: torch_dtype(out["data_type"]) for out in outputs},
            max_batch=int(metadata["max_batch"]),
            sequence_axis_inputs=[name for name in sequence.split(",") if name],
        )

    def run(self, items):
        return self.runner.run_batch(items)
