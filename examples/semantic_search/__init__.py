"""Semantic search service: FastAPI on :class:`tritonrepo_client.AsyncEmbeddingClient`
(``app.py``; ``README.md`` says how to run it)."""
