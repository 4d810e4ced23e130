"""Generated tests of the described pipelines (tritonrepo-new writes one module per pipeline)."""
