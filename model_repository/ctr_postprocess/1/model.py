"""ctr_ranking step 3: ctr, CANDIDATE_IDS, K -> ITEM_IDS, SCORES."""

from tritonrepo.ctr.steps import PostprocessStep


class TritonPythonModel(PostprocessStep):
    """Python-backend entry point; initialize/execute/finalize come from PostprocessStep."""
