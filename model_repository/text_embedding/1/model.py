"""text_embedding on the GPU in one step: preprocess -> text_embedding_encoder -> postprocess."""

from tritonrepo.pipelines.chained_step import ChainedStep


class TritonPythonModel(ChainedStep):
    """Python-backend entry point; initialize/execute/finalize come from ChainedStep."""
