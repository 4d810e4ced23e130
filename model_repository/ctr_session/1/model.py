"""ctr_session on CPU (configs/cpu.pbtxt; logic: tritonrepo.ctr.steps.SessionStep)."""

from tritonrepo.ctr.steps import SessionStep


class TritonPythonModel(SessionStep):
    """Python-backend entry point; initialize/execute/finalize come from SessionStep."""
