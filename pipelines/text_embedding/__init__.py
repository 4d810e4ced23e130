"""text_embedding: described in pipeline.toml; its logic lives in tritonrepo.text."""
