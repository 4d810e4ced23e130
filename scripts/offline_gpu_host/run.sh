#!/usr/bin/env bash
# On the offline GPU host, after setup.sh has unpacked all three parts: what `make test-gpu`
# (STEP=test: export the torch_gpu programs, then the GPU server tests) and `make bench-gpu`
# (STEP=bench) run, with the host's Python. Logs go to $OUT (default build/gpu-run).
set -uo pipefail
source "${GPU_HOST:-/tmp/gpu-host}/env.sh"
out=${OUT:-build/gpu-run}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
case ${STEP:-test} in
  test)
    timeout 200 python -m builders.torch_export 2>&1 | grep -v DEBUG | tee "$out/artifacts-gpu.log"
    for m in text_embedding_encoder ctr_model; do
      cp "model_repository/$m/1/torch_metadata.json" "$out/$m.torch_metadata.json" 2>/dev/null
    done
    timeout 300 python -m pytest -m gpu -p no:cacheprovider -q tests/test_gpu_serving.py 2>&1 \
      | tee "$out/test-gpu.log"
    cp build/test-logs/gpu.log "$out/tritonserver-test.log" 2>/dev/null ;;
  bench)
    timeout 540 python -m benchmarks.gpu --output "$out/bench-gpu" 2>&1 | tee "$out/bench-gpu.log" ;;
esac
