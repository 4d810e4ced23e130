"""click_lightgbm step 1: FEATURES -> features."""

from tritonrepo.pipelines.function_step import FunctionStep


class TritonPythonModel(FunctionStep):
    """Python-backend entry point; initialize/execute/finalize come from FunctionStep."""
