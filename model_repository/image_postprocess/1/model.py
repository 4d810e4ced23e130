"""image_classification step 3: logits, K -> LABELS, SCORES, PROBABILITIES."""

from tritonrepo.image.steps import PostprocessStep


class TritonPythonModel(PostprocessStep):
    """Python-backend entry point; initialize/execute/finalize come from PostprocessStep."""
