"""Python-based backend ``onnxruntime_python``: serves ``<version>/<default_model_filename>``
(an ONNX file) with ONNX Runtime on CPU, running each dynamic batch as one or a few session runs.

Select it with ``backend: "onnxruntime_python"`` in a model config (see
``model_repository/text_embedding_encoder/configs/cpu.pbtxt``). Config parameters:
:data:`tritonrepo.runners.onnx_runner.RUNNER_PARAMETERS` (sequence packing is described there).
"""

from tritonrepo.runners.onnx_runner import RUNNER_PARAMETERS, runner_from_settings
from tritonrepo.step.python_step import PythonStep


class TritonPythonModel(PythonStep):
    """ONNX Runtime model; inputs and outputs are the config's, matched by name."""

    PARAMETERS = RUNNER_PARAMETERS

    def setup(self) -> None:
        self.runner = runner_from_settings(
            self.artifact(self.model_config.get("default_model_filename") or "model.onnx"),
            self.settings,
            output_names=[out["name"] for out in self.model_config["output"]],
        )

    def run(self, items):
        return self.runner.run_batch(items)
