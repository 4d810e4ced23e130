"""sensor_stream session model: READING -> Z, ALARM (logic: pipelines.sensor_stream.steps:step)."""

from tritonrepo.pipelines.session_step import SessionStep


class TritonPythonModel(SessionStep):
    """Python-backend entry point; initialize/execute/finalize come from SessionStep."""
