"""Breast-cancer screening: 30 Wisconsin measurements in, a diagnosis out (sklearn -> ONNX)."""
