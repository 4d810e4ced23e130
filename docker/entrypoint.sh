#!/usr/bin/env bash
# Start tritonserver on the model repository: the image's copy, or the host's mounted over it
# (docker/compose.yaml); $TRITONREPO_MODEL_REPOSITORY names another folder.
#   GPU (default): serves config.pbtxt (TensorRT). Build the plans on this GPU first with
#   `make build-plans` (docker/README.md); without them the container stops with one line.
#   TRITONREPO_CONFIG=cpu: serves configs/cpu.pbtxt (ONNX Runtime on CPU), no GPU needed.
# The admin APIs (model repository, shared memory, logging, trace) are restricted with a key taken from
# $TRITONREPO_REPOSITORY_KEY or the file $TRITONREPO_REPOSITORY_KEY_FILE (e.g. a Docker/K8s
# secret); without either, a random key is written to /tmp/repository.key (mode 0600).
# Extra arguments are passed to tritonserver.
set -euo pipefail
repo="${TRITONREPO_MODEL_REPOSITORY:-/opt/tritonrepo/model_repository}"
config_name=""  # configs/<name>.pbtxt as Triton resolves --model-config-name; "" = config.pbtxt
[[ "${TRITONREPO_CONFIG:-gpu}" == "cpu" ]] && config_name=cpu
# What `make serve` loads (tritonrepo/server/load_list.py): the launcher's models (the ones the
# health check, `tritonrepo-client health`, probes by default), every other ensemble that declares
# its own probe (the pipelines tritonrepo-new generated), and the models any of them calls through
# BLS (declared in its config: parameter tritonrepo_calls), each before its caller.
load="$(python -m tritonrepo.server.load_list --repository "$repo" \
  --model-config-name "$config_name")" \
  || { echo "error: cannot list the models to load (above)" >&2; exit 1; }
mapfile -t models <<< "$load"
header=x-model-repository-key
# API categories only key holders may call (tritonrepo/server/repository_key.py RESTRICTED_APIS).
restricted=model-repository,shared-memory,logging,trace
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
  --model-repository="$repo" --model-control-mode=explicit "${models[@]/#/--load-model=}"
  --http-restricted-api="$restricted:$header=$key"
  --grpc-restricted-protocol="$restricted:$header=$key"
  # /v2/health/ready must not flip when an unrelated model fails to load; readiness probes
  # run `tritonrepo-client health` (a real inference per served model) instead.
  --strict-readiness=false
  # Latency quantiles per model (nv_inference_request_summary_us{quantile="0.99"}), which the
  # p99 alert and the dashboard read (deploy/prometheus/alerts.yml), as the launcher runs it:
  # only p50 and p99 (tritonrepo/server/command.py, SUMMARY_QUANTILES, says what the others cost).
  --metrics-config=summary_latencies=true
  --metrics-config=summary_quantiles=0.5:0.05,0.99:0.001
)
if [[ "${TRITONREPO_CONFIG:-gpu}" == "cpu" ]]; then
  args+=(--model-config-name=cpu)
else
  missing=()  # TensorRT models (platform tensorrt_plan) without 1/model.plan
  for config in "$repo"/*/config.pbtxt; do
    model="$(dirname "$config")"
    if grep -q '^platform: *"tensorrt_plan"' "$config" && [[ ! -f "$model/1/model.plan" ]]; then
      missing+=("$(basename "$model")")
    fi
  done
  if (( ${#missing[@]} )); then
    # Plans are built by the builder image on this GPU (make build-plans), which has TensorRT's
    # Python API, Polygraphy and the real samples of calibration and gate; this image has none.
    echo "error: no model.plan for ${missing[*]}: build the plans on this GPU with" \
         "'make build-plans' (docker/README.md) and mount the repository, or start with" \
         "TRITONREPO_CONFIG=cpu" >&2
    exit 1
  fi
fi
# Check the repository for this config set before starting: artifacts, each plan against this
# GPU and TensorRT, configs against the ONNX graphs, /dev/shm (tritonrepo/server/preflight.py).
python -m tritonrepo.server.preflight --repository "$repo" --model-config-name "$config_name" \
  "${models[@]/#/--model=}" \
  || { echo "error: the preflight above failed; tritonserver was not started" >&2; exit 1; }
# A restarted container of the same pod keeps its /dev/shm (Kubernetes mounts a memory emptyDir
# that lives as long as the pod): the Python-backend regions of the server that died would
# stay there, counted against that volume. No other server uses this /dev/shm.
rm -f /dev/shm/triton_python_backend_shm_region_*
exec tritonserver "${args[@]}" "$@"
