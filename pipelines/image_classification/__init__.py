"""image_classification: described in pipeline.toml; its logic lives in tritonrepo.image."""
