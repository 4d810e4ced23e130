#!/usr/bin/env bash
# Start tritonserver on the baked-in model repository.
#   GPU (default): builds model.plan on first start if missing, serves config.pbtxt (TensorRT).
#   TRITONREPO_CONFIG=cpu: serves configs/cpu.pbtxt (ONNX Runtime on CPU), no GPU needed.
# The model-repository API (load/unload/index) is restricted with a key taken from
# $TRITONREPO_REPOSITORY_KEY or the file $TRITONREPO_REPOSITORY_KEY_FILE (e.g. a Docker/K8s
# secret); without either, a random key is written to /tmp/repository.key (mode 0600).
# Extra arguments are passed to tritonserver.
set -euo pipefail
repo=/opt/tritonrepo/model_repository
header=x-model-repository-key
if [[ -n "${TRITONREPO_REPOSITORY_KEY:-}" ]]; then
  key="$TRITONREPO_REPOSITORY_KEY"
elif [[ -n "${TRITONREPO_REPOSITORY_KEY_FILE:-}" ]]; then
  key="$(tr -d '[:space:]' < "$TRITONREPO_REPOSITORY_KEY_FILE")"
else
  umask 077
  key="$(python -c 'import secrets; print(secrets.token_urlsafe(32))')"
  printf '%s\n' "$key" > /tmp/repository.key
  echo "model-repository API key written to /tmp/repository.key" >&2
fi
[[ -n "$key" ]] || { echo "error: the repository key is empty" >&2; exit 1; }
args=(
  --model-repository="$repo" --model-control-mode=explicit --load-model=text_embedding
  --http-restricted-api="model-repository:$header=$key"
  --grpc-restricted-protocol="model-repository:$header=$key"
)
if [[ "${TRITONREPO_CONFIG:-gpu}" == "cpu" ]]; then
  args+=(--model-config-name=cpu)
elif [[ ! -f "$repo/text_embedding_encoder/1/model.plan" ]]; then
  if python -c "import tensorrt" 2>/dev/null; then
    python -m builders.text_embedding_tensorrt --repository "$repo" \
      --precision "${TRITONREPO_PRECISION:-fp16}"
  else
    echo "error: no model.plan and no TensorRT Python bindings in this image: build the plan" \
         "in nvcr.io/nvidia/tensorrt:24.10-py3 on this GPU (docker/README.md) and mount it," \
         "or start with TRITONREPO_CONFIG=cpu" >&2
    exit 1
  fi
fi
exec tritonserver "${args[@]}" "$@"
