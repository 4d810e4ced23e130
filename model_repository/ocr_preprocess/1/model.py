"""ocr step 1: IMAGE -> x, image, record (logic: pipelines.ocr.steps:preprocess)."""

from tritonrepo.pipelines.function_step import FunctionStep


class TritonPythonModel(FunctionStep):
    """Python-backend entry point; initialize/execute/finalize come from FunctionStep."""
