"""Python-based backend ``onnxruntime_python``: serves ``<version>/<default_model_filename>``
(an ONNX file) with ONNX Runtime on CPU, running each dynamic batch as one or a few session runs.

Select it with ``backend: "onnxruntime_python"`` in a model config (see
``model_repository/text_embedding_encoder/configs/cpu.pbtxt``). Config parameters:
:attr:`TritonPythonModel.PARAMETERS` (sequence packing: ``tritonrepo.runners.onnx_runner``).
"""

from tritonrepo.runners.onnx_runner import OnnxRunner
from tritonrepo.step.parameters import Parameter
from tritonrepo.step.python_step import PythonStep


class TritonPythonModel(PythonStep):
    """ONNX Runtime model; inputs and outputs are the config's, matched by name."""

    PARAMETERS = (
        Parameter(
            "intra_op_threads",
            "int",
            0,
            "threads",
            "ONNX Runtime intra-op threads per instance; 0 = one per core",
            minimum=0,
        ),
        Parameter(
            "allow_spinning",
            "flag",
            True,
            "",
            "'0' makes idle ONNX Runtime threads sleep instead of spin (ONNX Runtime's default)",
        ),
        Parameter(
            "sequence_mask_input",
            "str",
            None,
            "input",
            "attention-mask input of a padded-sequence encoder; turns on sequence packing",
        ),
        Parameter(
            "packing_max_tokens",
            "int",
            2048,
            "tokens",
            "padded tokens per packed sub-batch (pack_by_length)",
            minimum=1,
        ),
        Parameter(
            "packing_max_padding",
            "float",
            0.1,
            "share of padded tokens",
            "largest share of padding in a packed sub-batch",
            minimum=0.0,
            maximum=1.0,
        ),
    )

    def setup(self) -> None:
        settings = self.settings
        self.runner = OnnxRunner(
            self.artifact(self.model_config.get("default_model_filename") or "model.onnx"),
            intra_op_threads=settings["intra_op_threads"],
            output_names=[out["name"] for out in self.model_config["output"]],
            sequence_mask=settings["sequence_mask_input"],
            max_tokens=settings["packing_max_tokens"],
            max_padding=settings["packing_max_padding"],
            allow_spinning=settings["allow_spinning"],
        )

    def run(self, items):
        return self.runner.run_batch(items)
