"""Pipelines brought in by their users: one folder per pipeline, holding its ``pipeline.toml``
and the code it names."""
