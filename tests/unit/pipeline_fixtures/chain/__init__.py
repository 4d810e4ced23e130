"""The chain pipeline of the graph-description tests: ``X`` FP32 [b, 4] -> ``first`` (the toy
graph, scores = X' @ W + b) -> ReLU step -> ``second`` (x * 2) -> a step calling ``scale``
(v * 3 - 1) through its ``models`` argument -> ``OUT`` FP32 [b, 2]."""
