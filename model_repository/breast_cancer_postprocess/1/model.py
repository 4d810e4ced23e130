"""breast_cancer step 3: label, probabilities -> DIAGNOSIS, PROBABILITY_MALIGNANT."""

from tritonrepo.pipelines.function_step import FunctionStep


class TritonPythonModel(FunctionStep):
    """Python-backend entry point; initialize/execute/finalize come from FunctionStep."""
