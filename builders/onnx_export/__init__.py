"""Stage 1: each model's ONNX export from its source weights (and the CTR training), with parity
gates.
"""
