"""ctr_ranking step 1: HISTORY, CANDIDATES, TOP_K -> input_ids, CANDIDATE_IDS, K."""

from tritonrepo.ctr.steps import PreprocessStep


class TritonPythonModel(PreprocessStep):
    """Python-backend entry point; initialize/execute/finalize come from PreprocessStep."""
