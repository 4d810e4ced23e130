"""digit_stream session model: ROW -> DIGIT, PROBABILITIES, ROWS_SEEN."""

from tritonrepo.pipelines.session_step import SessionStep


class TritonPythonModel(SessionStep):
    """Python-backend entry point; initialize/execute/finalize come from SessionStep."""
