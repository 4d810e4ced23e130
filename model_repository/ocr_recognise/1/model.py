"""ocr step 3: det_map, image, record -> TEXT, LINES (logic: pipelines.ocr.steps:recognise)."""

from tritonrepo.pipelines.function_step import FunctionStep


class TritonPythonModel(FunctionStep):
    """Python-backend entry point; initialize/execute/finalize come from FunctionStep."""
