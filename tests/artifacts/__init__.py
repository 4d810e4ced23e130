"""Tests: see tests/README.md."""
