"""The ensembles this repository serves: the one list that the launcher loads by default and that
health checks, self-healing and the CLI probe."""

from __future__ import annotations

DEFAULT_MODELS = ("text_embedding", "ctr_ranking", "ctr_session", "image_classification")

__all__ = ["DEFAULT_MODELS"]
