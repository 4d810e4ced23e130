"""text_embedding step 3: token_embeddings -> EMBEDDING (logic: tritonrepo.text.steps)."""

from tritonrepo.text.steps import PoolStep


class TritonPythonModel(PoolStep):
    """Python-backend entry point; initialize/execute/finalize come from PoolStep."""
