"""click_lightgbm step 3: label, probabilities -> CLICK_PROBABILITY."""

from tritonrepo.pipelines.function_step import FunctionStep


class TritonPythonModel(FunctionStep):
    """Python-backend entry point; initialize/execute/finalize come from FunctionStep."""
