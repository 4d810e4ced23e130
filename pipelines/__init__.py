"""Pipelines brought in by their users: one folder per pipeline, its ``pipeline.toml`` and the code it names."""
