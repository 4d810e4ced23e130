"""Python-based backend ``onnxruntime_python``: serves ``<version>/<default_model_filename>``
(an ONNX file) with ONNX Runtime on CPU, running each dynamic batch as one or a few session runs.

Select it with ``backend: "onnxruntime_python"`` in a model config (see
``model_repository/text_embedding_encoder/configs/cpu.pbtxt``). Config parameters:

* ``intra_op_threads``: ONNX Runtime threads per instance (default 0 = one per core);
* ``allow_spinning``: ``"0"`` makes idle ONNX Runtime threads sleep instead of spin (default
  ``"1"``, ONNX Runtime's own default);
* ``sequence_mask_input``: the attention-mask input of a padded-sequence encoder; turns on
  sequence packing (``tritonrepo.runners.onnx_runner``), with ``packing_max_tokens`` (default 2048)
  and ``packing_max_padding`` (default 0.1).
"""

from tritonrepo.runners.onnx_runner import OnnxRunner
from tritonrepo.step.python_step import PythonStep


class TritonPythonModel(PythonStep):
    """ONNX Runtime model; inputs and outputs are the config's, matched by name."""

    def setup(self) -> None:
        self.runner = OnnxRunner(
            self.artifact(self.model_config.get("default_model_filename") or "model.onnx"),
            intra_op_threads=int(self.parameter("intra_op_threads", "0")),
            output_names=[out["name"] for out in self.model_config["output"]],
            sequence_mask=self.parameter("sequence_mask_input", "") or None,
            max_tokens=int(self.parameter("packing_max_tokens", "2048")),
            max_padding=float(self.parameter("packing_max_padding", "0.1")),
            allow_spinning=self.parameter("allow_spinning", "1") != "0",
        )

    def run(self, items):
        return self.runner.run_batch(items)
