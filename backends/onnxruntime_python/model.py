"""Python-based backend ``onnxruntime_python``: serves ``<version>/<default_model_filename>``
(an ONNX file) with ONNX Runtime on CPU, batching each dynamic batch into one session run.

Select it with ``backend: "onnxruntime_python"`` in a model config (see
``model_repository/text_embedding_encoder/configs/cpu.pbtxt``). Config parameters:
``intra_op_threads`` (default 0 = ONNX Runtime's choice).
"""

from tritonrepo.onnx_runner import OnnxRunner
from tritonrepo.triton_step import PythonStep


class TritonPythonModel(PythonStep):
    """ONNX Runtime model; inputs and outputs are the config's, matched by name."""

    def setup(self) -> None:
        self.runner = OnnxRunner(
            self.artifact(self.model_config.get("default_model_filename") or "model.onnx"),
            intra_op_threads=int(self.parameter("intra_op_threads", "0")),
            output_names=[out["name"] for out in self.model_config["output"]],
        )

    def run(self, items):
        return self.runner.run_batch(items)
