"""ctr_ranking step: ctr_preprocess (logic: tritonrepo.ctr.steps.PreprocessStep)."""

from tritonrepo.ctr.steps import PreprocessStep


class TritonPythonModel(PreprocessStep):
    """Python-backend entry point; initialize/execute/finalize come from PreprocessStep."""
