"""Pipelines described once (``pipelines/<name>/pipeline.toml``): the description and the generic steps that run its functions."""
