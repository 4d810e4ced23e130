"""Accuracy gates shared by the builders, and the INT8 study."""
