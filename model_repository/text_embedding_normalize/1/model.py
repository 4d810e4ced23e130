"""text_embedding step 3: sentence_embedding -> EMBEDDING (logic: tritonrepo.text.steps)."""

from tritonrepo.text.steps import NormalizeStep


class TritonPythonModel(NormalizeStep):
    """Python-backend entry point; initialize/execute/finalize come from NormalizeStep."""
