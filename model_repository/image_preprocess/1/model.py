"""image_classification step 1: IMAGE -> pixels, K (logic: tritonrepo.image.steps)."""

from tritonrepo.image.steps import PreprocessStep


class TritonPythonModel(PreprocessStep):
    """Python-backend entry point; initialize/execute/finalize come from PreprocessStep."""
