"""ctr_ranking step: ctr_postprocess (logic: tritonrepo.ctr.steps.PostprocessStep)."""

from tritonrepo.ctr.steps import PostprocessStep


class TritonPythonModel(PostprocessStep):
    """Python-backend entry point; initialize/execute/finalize come from PostprocessStep."""
