"""text_embedding step 3: sentence_embedding -> EMBEDDING."""

from tritonrepo.text.steps import NormalizeStep


class TritonPythonModel(NormalizeStep):
    """Python-backend entry point; initialize/execute/finalize come from NormalizeStep."""
