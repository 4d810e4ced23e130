"""nudenet_detector step 3: output0, LETTERBOX -> DETECTIONS, COUNT."""

from tritonrepo.pipelines.function_step import FunctionStep


class TritonPythonModel(FunctionStep):
    """Python-backend entry point; initialize/execute/finalize come from FunctionStep."""
