"""text_embedding step 3: sentence_embedding, token_count -> EMBEDDING, TOKENS."""

from tritonrepo.text.steps import NormalizeStep


class TritonPythonModel(NormalizeStep):
    """Python-backend entry point; initialize/execute/finalize come from NormalizeStep."""
