"""The steps of pipelines described once (``pipelines/<name>/pipeline.toml``): the generic steps
that run a description's functions and sessions in Triton's stub (the description itself is read
by :mod:`tritonrepo.description`)."""
