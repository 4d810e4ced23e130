"""ctr_session session step (logic: tritonrepo.ctr.steps:CtrSessionStep)."""

from tritonrepo.ctr.steps import CtrSessionStep


class TritonPythonModel(CtrSessionStep):
    """Python-backend entry point; initialize/execute/finalize come from CtrSessionStep."""
