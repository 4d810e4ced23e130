"""Stage 2: TensorRT plans built from the ONNX models on the serving GPU (NGC TensorRT 10.x)."""
