"""digit_scans step 1: IMAGE -> pixels (logic: pipelines.digit_scans.steps:preprocess)."""

from tritonrepo.pipelines.function_step import FunctionStep


class TritonPythonModel(FunctionStep):
    """Python-backend entry point; initialize/execute/finalize come from FunctionStep."""
