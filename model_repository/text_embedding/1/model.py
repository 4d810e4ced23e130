"""text_embedding in one step: preprocess -> text_embedding_encoder -> postprocess.

On the CPU or the GPU, as the loaded config names (tritonrepo/pipelines/one_step.py).
"""

from tritonrepo.pipelines.one_step import OneStep


class TritonPythonModel(OneStep):
    """Python-backend entry point; initialize/execute/finalize come from OneStep."""
