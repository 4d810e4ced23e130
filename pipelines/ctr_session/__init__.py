"""ctr_session: described in pipeline.toml; its logic lives in tritonrepo.ctr."""
