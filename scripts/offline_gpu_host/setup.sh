#!/usr/bin/env bash
# On the offline GPU host, from the repository root: unpack whichever of build/gpu-host/part*
# (scripts/offline_gpu_host/pack.sh, any number of parts) are present into $GPU_HOST (default
# /tmp/gpu-host), then print the environment to `source`. Safe to run once per transferred part,
# in any order: each part is merged into $GPU_HOST/incoming once, a file cut into chunks is joined
# when its last chunk arrives, and what is complete is installed:
#   server/  the tritonserver archive, the stubs' venv (numpy 1.26), libcudart and libb64
#   site/    wheels, into $GPU_HOST/site (PYTHONPATH)
#   infinity/ wheels, into $GPU_HOST/infinity (the embedding server of bench-gpu, not on PYTHONPATH)
#   files/   kept in $GPU_HOST/files and copied into the checkout (run.sh copies them again)
set -euo pipefail
dest=${GPU_HOST:-/tmp/gpu-host}
site=$dest/site
incoming=$dest/incoming
mkdir -p "$site" "$dest/lib" "$dest/files" "$incoming"
shopt -s nullglob
for part in build/gpu-host/part*/; do
  name=$(basename "$part")
  if [[ -f $dest/$name.done ]]; then
    continue
  fi
  cp -a "$part." "$incoming/"
  touch "$dest/$name.done"
done

# Join the files whose chunks have all arrived (<path>.chunk-<i>-of-<n>, parts.py).
for first in $(find "$incoming" -name '*.chunk-01-of-*' | sort); do
  base=${first%.chunk-01-of-*}
  count=${first##*-of-}
  chunks=()
  for ((i = 1; i <= 10#$count; i++)); do
    chunks+=("$(printf '%s.chunk-%02d-of-%s' "$base" "$i" "$count")")
  done
  if ls "${chunks[@]}" >/dev/null 2>&1; then
    cat "${chunks[@]}" > "$base.joining" && mv "$base.joining" "$base" && rm -f "${chunks[@]}"
  fi
done

server=$incoming/server
if [[ -f $server/server.tar.xz && ! -f $dest/server.done ]]; then
  tar -C "$site" -xJf "$server/server.tar.xz"
  cp "$server/libb64.so.0d" "$dest/lib/"
  cp "$server/libluajit-5.1.so.2" "$dest/lib/"
  mkdir -p "$dest/bin" && cp "$server/wrk" "$dest/bin/"
  # libcudart.so.12 for perf_analyzer, outside PYTHONPATH: the wheel's nvidia/__init__.py
  # would hide the host PyTorch's own nvidia.* packages.
  python -m pip install --quiet --no-index --no-deps --target "$dest/cudart" \
    "$server"/nvidia_cuda_runtime_cu12-*.whl
  # A venv for the Python backend stubs (TRITONREPO_STUB_PYTHON, tritonrepo.server.launcher.stub_python)
  # whose own numpy is 1.26 (the 2.51 stub reads tensors wrong with numpy 2: seen, FP32
  # [0.5, 1.5, 2.5, 3.5] arrived as four 0.5s, and BYTES inputs crash it) and which sees the
  # host's PyTorch stack after that (.pth). Tests, builders and benchmarks keep the host's
  # Python: its scipy and scikit-learn need its numpy 2.
  host_site=$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  python -m venv --without-pip "$dest/venv"
  venv_site=$("$dest/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$host_site" > "$venv_site/zz_host_site_packages.pth"
  python -m pip install --quiet --no-index --no-deps --target "$venv_site" "$server"/numpy-*.whl
  rm -rf "$server"
  touch "$dest/server.done"
fi
wheels=("$incoming"/site/*.whl)
if ((${#wheels[@]})); then
  # Into a fresh folder, then merged: `pip install --target --upgrade` replaces whole top-level
  # folders, so a later part's bin/ (pytest's scripts) would delete an earlier one's
  # (tritonclient's perf_analyzer), and zope.* packages share one folder.
  fresh=$(mktemp -d "$dest/wheels.XXXX")
  python -m pip install --quiet --no-index --no-deps --target "$fresh" "${wheels[@]}"
  cp -a "$fresh/." "$site/" && rm -rf "$fresh"
  rm -f "${wheels[@]}"
fi
infinity=("$incoming"/infinity/*.whl)
if ((${#infinity[@]})); then
  # infinity-emb (bench-gpu's embedding server) in a folder of its own, never on PYTHONPATH: its
  # sentence-transformers 3 and transformers 4 would hide the host's (benchmarks/ensembles/embedding_server.py
  # puts it first for the infinity-emb process only).
  fresh=$(mktemp -d "$dest/infinity.XXXX")
  python -m pip install --quiet --no-index --no-deps --target "$fresh" "${infinity[@]}"
  mkdir -p "$dest/infinity" && cp -a "$fresh/." "$dest/infinity/" && rm -rf "$fresh"
  rm -f "${infinity[@]}"
fi
if [[ -d $incoming/files ]]; then  # whole files only: chunks wait for the rest
  (cd "$incoming/files" && find . -type f ! -name '*.chunk-*' -print0 | while IFS= read -r -d '' f; do
    mkdir -p "$dest/files/$(dirname "$f")" && mv "$f" "$dest/files/$f"
  done)
fi
cp -a "$dest/files/." .

cudart=$dest/cudart/nvidia/cuda_runtime/lib
cat > "$dest/env.sh" <<ENV
export PYTHONPATH=$site:$PWD\${PYTHONPATH:+:\$PYTHONPATH}
export PATH=$site/bin:$dest/bin:\$PATH
export TRITONREPO_STUB_PYTHON=$dest/venv/bin/python
export LD_LIBRARY_PATH=$dest/lib:$cudart\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
export HF_HUB_OFFLINE=1
export TRITONREPO_INFINITY_SITE=$dest/infinity
ENV
left=$(find "$incoming" -name '*.chunk-*' | wc -l)
echo "setup: parts $(cd "$dest" && ls part*.done 2>/dev/null | sed 's/.done//' | tr '\n' ' ')unpacked;" \
  "$left chunks wait for their other parts" >&2
echo "source $dest/env.sh"
