"""The core model: NudeNet's bundled YOLOv8n ONNX, pinned to its 320x320 input."""

from pathlib import Path

import nudenet
import onnx

SIZE = 320  # NudeDetector's default inference_resolution


def build() -> onnx.ModelProto:
    """NudeNet's ``320n.onnx`` with height/width fixed to 320 (the batch dim stays dynamic).

    Input ``images`` FP32 [batch, 3, 320, 320] (RGB-order blob in [0, 1], as
    ``nudenet.nudenet._read_image`` makes it); output ``output0`` FP32 [batch, 22, 2100]
    (cx, cy, w, h in model pixels + 18 class scores, for 40*40 + 20*20 + 10*10 anchors).
    Weights and nodes are unchanged; only the symbolic spatial dims are made concrete.
    """
    model = onnx.load(Path(nudenet.__file__).with_name("320n.onnx"))
    for dim in model.graph.input[0].type.tensor_type.shape.dim[2:]:
        dim.dim_value = SIZE
    model.graph.output[0].type.tensor_type.shape.dim[2].dim_value = sum(
        (SIZE // s) ** 2 for s in (8, 16, 32)
    )
    del model.graph.value_info[:]  # stale symbolic shapes; re-inferred below
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    onnx.checker.check_model(model)
    return model
