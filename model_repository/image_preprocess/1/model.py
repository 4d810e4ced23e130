"""image_classification step 1: IMAGE, TOP_K -> pixels, K."""

from tritonrepo.image.steps import PreprocessStep


class TritonPythonModel(PreprocessStep):
    """Python-backend entry point; initialize/execute/finalize come from PreprocessStep."""
