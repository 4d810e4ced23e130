"""Pipelines described once (``pipelines/<name>/pipeline.toml``): the description, and the
generic step that runs its functions."""
