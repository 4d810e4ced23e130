"""Example applications built on the project's clients (``examples/<name>/README.md``)."""
