"""breast_cancer on CPU in one step: preprocess -> breast_cancer_model -> postprocess."""

from tritonrepo.pipelines.fused_step import FusedStep


class TritonPythonModel(FusedStep):
    """Python-backend entry point; initialize/execute/finalize come from FusedStep."""
