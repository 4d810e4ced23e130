"""ctr_session session step (logic: tritonrepo.ctr.steps:SessionStep)."""

from tritonrepo.ctr.steps import SessionStep


class TritonPythonModel(SessionStep):
    """Python-backend entry point; initialize/execute/finalize come from SessionStep."""
