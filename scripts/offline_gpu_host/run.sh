#!/usr/bin/env bash
# On the offline GPU host, after setup.sh has unpacked all the parts: what `make artifacts-gpu`
# (STEP=artifacts: export the torch_gpu programs with the builders builders/gpu_sources.py names,
# then check the set with the preflight), `make test-gpu` (STEP=test: artifacts, then every
# test marked gpu; STEP=gpu-tests: the tests alone) and `make bench-gpu` (STEP=bench, with
# $BENCH_ARGS, e.g. "--only text") run, with the host's Python. Logs go to $OUT (default
# build/gpu-run).
set -uo pipefail
host=${GPU_HOST:-/tmp/gpu-host}
source "$host/env.sh"
out=${OUT:-build/gpu-run}
mkdir -p "$out"
# The carried artifacts, again: a fresh checkout has none of these ignored files.
cp -a "$host/files/." . 2>/dev/null
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
artifacts() {
  : > "$out/artifacts-gpu.log"
  # One model at a time, each with its own deadline: an AOTInductor compile takes minutes.
  # $EXPORT_MODELS (names) builds those alone, e.g. to spread the builds over several calls.
  for builder in $(python -m builders.gpu_sources builders); do
    if [[ $builder == builders.torch_programs.export ]]; then
      models=${EXPORT_MODELS:-$(python -c 'from builders.torch_programs.export import MODELS; print(*MODELS)')}
      for model in $models; do
        timeout 500 python -m "$builder" --model "$model" 2>&1 | grep -v DEBUG \
          | tee -a "$out/artifacts-gpu.log"
      done
    else
      timeout 300 python -m "$builder" 2>&1 | grep -v DEBUG | tee -a "$out/artifacts-gpu.log"
    fi
  done
  for metadata in model_repository/*/1/torch_metadata.json; do
    [[ -f $metadata ]] || continue
    cp "$metadata" "$out/$(basename "$(dirname "$(dirname "$metadata")")").torch_metadata.json"
  done
  timeout 120 python -m tritonrepo.server.preflight --model-config-name torch_gpu 2>&1 \
    | tee "$out/preflight.log"
}
gpu_tests() {
  # tests/gpu only: the host lacks what some other test modules import.
  timeout 480 python -m pytest -m gpu -p no:cacheprovider -q tests/gpu \
    2>&1 | tee "$out/test-gpu.log"
  cp build/test-logs/gpu.log "$out/tritonserver-test.log" 2>/dev/null
}
case ${STEP:-test} in
  artifacts) artifacts ;;
  test) artifacts && gpu_tests ;;
  gpu-tests) gpu_tests ;;
  bench)
    # shellcheck disable=SC2086  # BENCH_ARGS is a list of options
    timeout 560 python -m benchmarks.gpu --output "$out/bench-gpu" ${BENCH_ARGS:-} 2>&1 \
      | tee "$out/bench-gpu.log" ;;
esac
