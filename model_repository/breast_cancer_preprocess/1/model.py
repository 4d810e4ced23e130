"""breast_cancer step 1: MEASUREMENTS -> features (logic: pipelines.breast_cancer.steps:preprocess)."""

from tritonrepo.pipelines.function_step import FunctionStep


class TritonPythonModel(FunctionStep):
    """Python-backend entry point; initialize/execute/finalize come from FunctionStep."""
