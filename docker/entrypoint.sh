#!/usr/bin/env bash
# Start tritonserver on the baked-in model repository.
#   GPU (default): builds model.plan on first start if missing, serves config.pbtxt (TensorRT).
#   TRITONREPO_CONFIG=cpu: serves configs/cpu.pbtxt (ONNX Runtime on CPU), no GPU needed.
# Extra arguments are passed to tritonserver.
set -euo pipefail
repo=/opt/tritonrepo/model_repository
args=(--model-repository="$repo" --model-control-mode=explicit --load-model=text_embedding)
if [[ "${TRITONREPO_CONFIG:-gpu}" == "cpu" ]]; then
  args+=(--model-config-name=cpu)
elif [[ ! -f "$repo/text_embedding_encoder/1/model.plan" ]]; then
  python -m builders.text_embedding_tensorrt --repository "$repo" --precision "${TRITONREPO_PRECISION:-fp16}"
fi
exec tritonserver "${args[@]}" "$@"
