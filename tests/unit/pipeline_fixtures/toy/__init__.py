"""The toy pipeline: ``X`` FP32 [b, 4] and ``TAG`` BYTES [b, 1] in, ``SCORES`` FP32 [b, 2] and
``LABEL`` BYTES [b, 1] out, around a MatMul/Add/Identity ONNX graph (batch dim dynamic)."""
