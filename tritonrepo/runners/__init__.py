"""Engine runners behind the Python-based backends: ONNX Runtime and PyTorch programs (with CUDA
graphs).
"""
