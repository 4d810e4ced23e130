"""text_embedding step 1: TEXT -> input_ids, attention_mask, token_count."""

from tritonrepo.text.steps import TokenizeStep


class TritonPythonModel(TokenizeStep):
    """Python-backend entry point; initialize/execute/finalize come from TokenizeStep."""
