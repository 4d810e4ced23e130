"""ctr_ranking: described in pipeline.toml; its logic lives in tritonrepo.ctr."""
