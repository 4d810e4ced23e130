#!/usr/bin/env bash
# On the offline GPU host, from the repository root: unpack whichever of build/gpu-host/part1..3
# (scripts/offline_gpu_host/pack.sh) is present into $GPU_HOST (default /tmp/gpu-host), then
# print the environment to `source`. Safe to run once per transferred part.
set -euo pipefail
dest=${GPU_HOST:-/tmp/gpu-host}
site=$dest/site
mkdir -p "$site" "$dest/lib"
if [[ -f build/gpu-host/part1/server.tar.xz && ! -f $dest/part1.done ]]; then
  tar -C "$site" -xJf build/gpu-host/part1/server.tar.xz
  cp build/gpu-host/part1/libb64.so.0d "$dest/lib/"
  # libcudart.so.12 for perf_analyzer, outside PYTHONPATH: the wheel's nvidia/__init__.py
  # would hide the host PyTorch's own nvidia.* packages.
  python -m pip install --quiet --no-index --no-deps --target "$dest/cudart" \
    build/gpu-host/part1/nvidia_cuda_runtime_cu12-*.whl
  rm build/gpu-host/part1/nvidia_cuda_runtime_cu12-*.whl
  # A venv for the Python backend stubs (TRITONREPO_STUB_PYTHON, tritonrepo.launcher.stub_python)
  # whose own numpy is 1.26 (the 2.51 stub reads tensors wrong with numpy 2: seen, FP32
  # [0.5, 1.5, 2.5, 3.5] arrived as four 0.5s, and BYTES inputs crash it) and which sees the
  # host's PyTorch stack after that (.pth). Tests, builders and benchmarks keep the host's
  # Python: its scipy and scikit-learn need its numpy 2.
  host_site=$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  python -m venv --without-pip "$dest/venv"
  venv_site=$("$dest/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$host_site" > "$venv_site/zz_host_site_packages.pth"
  python -m pip install --quiet --no-index --no-deps --target "$venv_site" \
    build/gpu-host/part1/numpy-*.whl
  rm build/gpu-host/part1/numpy-*.whl
fi
ln -sfn "$PWD/client" "$site/tritonrepo_client"
for part in 1 2 3; do
  if [[ ! -d build/gpu-host/part$part || -f $dest/part$part.done ]]; then
    continue
  fi
  wheels=(build/gpu-host/part$part/*.whl)
  if [[ -e ${wheels[0]} ]]; then
    python -m pip install --quiet --no-index --no-deps --target "$site" "${wheels[@]}"
  fi
  cp build/gpu-host/part$part/minilm.whl.part* "$dest/" 2>/dev/null || true
  touch "$dest/part$part.done"
done
if [[ -f build/gpu-host/part3/ctr_model.pt ]]; then
  mkdir -p build/ctr model_repository/text_embedding_tokenize/1
  cp build/gpu-host/part3/ctr_model.pt build/ctr/model.pt
  cp build/gpu-host/part3/tokenizer.json model_repository/text_embedding_tokenize/1/
  cp build/gpu-host/part3/minilm.name "$dest/"
fi
if [[ -f $dest/minilm.whl.part00 && -f $dest/minilm.whl.part01 && -f $dest/minilm.name ]]; then
  cat "$dest"/minilm.whl.part0{0,1} > "$dest/$(cat "$dest/minilm.name")"
  python -m pip install --quiet --no-index --no-deps --target "$site" "$dest/$(cat "$dest/minilm.name")"
  rm -f "$dest"/minilm.whl.part0{0,1}
fi
cudart=$dest/cudart/nvidia/cuda_runtime/lib
cat > "$dest/env.sh" <<ENV
export PYTHONPATH=$site:$PWD\${PYTHONPATH:+:\$PYTHONPATH}
export PATH=$site/bin:\$PATH
export TRITONREPO_STUB_PYTHON=$dest/venv/bin/python
export LD_LIBRARY_PATH=$dest/lib:$cudart\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
export HF_HUB_OFFLINE=1
ENV
echo "source $dest/env.sh"
