"""The Triton model repository's own code: what runs in the stubs (``step``, ``runners``, ``text``,
``ctr``, ``image``) and the launcher process (``server``); the layers: docs/architecture.md.

The Python-backend ``model.py`` files in ``model_repository/`` and the Python-based backend in
``backends/`` are thin adapters over this package, so everything here is unit-testable without a
running server.
"""
