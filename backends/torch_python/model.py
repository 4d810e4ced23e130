"""Python-based backend ``torch_python``: serves ``<version>/<default_model_filename>`` (a
``torch.export`` program, ``model.pt2``) with PyTorch on the instance's GPU (or CPU).

Select it with ``backend: "torch_python"`` in a model config (the ``torch_gpu`` config set, e.g.
``model_repository/text_embedding_encoder/configs/torch_gpu.pbtxt``); build the program on the
serving host with ``make artifacts-gpu``. The model and its config parameters are
:class:`tritonrepo.runners.torch_step.TorchProgramStep`.
"""

from tritonrepo.runners.torch_step import TorchProgramStep


class TritonPythonModel(TorchProgramStep):
    """Python-backend entry point; initialize/execute/finalize come from TorchProgramStep."""
