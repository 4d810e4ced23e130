"""Shared logic of the Triton model repository: launcher, text processing, ONNX runner, checks.

The Python-backend ``model.py`` files in ``model_repository/`` and the Python-based backend in
``backends/`` are thin adapters over this package, so everything here is unit-testable without a
running server.
"""
