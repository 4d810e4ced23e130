"""``make bench-pipelines``: described pipelines against in-process and their FastAPI service."""
