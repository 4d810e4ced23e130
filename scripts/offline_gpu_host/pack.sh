#!/usr/bin/env bash
# Pack what `make test-gpu` / `make bench-gpu` need on an offline GPU host that has Python 3.12,
# PyTorch (CUDA) and sentence-transformers but no registry access and no NVIDIA container (the
# H200 machine the README's GPU figures come from). Run here, from the repository root, after
# `make artifacts`; it stages under build/gpu-host/stage/ and writes build/gpu-host/part1..N,
# each at most $PART_MIB MiB (one 64 MiB transfer with the checkout):
#   server/  the embedded tritonserver (nvidia-pytriton 0.7.0 trimmed to the Python 3.12 stub),
#            numpy 1.26 for the stubs' venv (the 2.51 Python backend needs numpy < 2), the CUDA 12
#            runtime and libb64 for perf_analyzer: all in part1
#   site/    wheels for the host's Python: tritonclient and the HTTP client's gevent stack,
#            pytest, hypothesis, py-spy (where a stub's time goes), FastAPI + uvicorn with
#            their dependencies (bench-gpu), and the
#            sources of the programs the host exports (builders/gpu_sources.py: MiniLM weights...)
#   infinity/ wheels of infinity-emb and its own dependencies (bench-gpu's embedding-server row)
#   files/   what the preflight requires for the torch_gpu set and `make artifacts` builds here
#            (tokenizer.json, labels.txt, model.onnx...) and the exporters' source files
#            (build/ctr/model.pt), at their paths in the checkout
# The files/ and source wheels come from `python -m builders.gpu_sources stage`, which lists them
# from the preflight's own checks; scripts/offline_gpu_host/parts.py cuts the stage into parts
# (large files in chunks). setup.sh unpacks them on the host, in any order, one call each.
set -euo pipefail
PY=${PY:-.venv/bin/python}
PYVER=${PYVER:-3.12}
PART_MIB=${PART_MIB:-59}
CONFIG_SET=${CONFIG_SET:-torch_gpu}
out=build/gpu-host
stage=$out/stage
rm -rf "$out" && mkdir -p "$stage"/{server,site,files}
platforms=(--platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux_2_28_x86_64 --platform manylinux_2_35_x86_64)
download() { "$PY" -m pip download --quiet --only-binary=:all: --python-version "$PYVER" \
  "${platforms[@]}" "$@"; }
# The first pin of a package, marker dropped: the embedded 2.51 stack's (protobuf 4.25.9 for
# tritonclient 2.51.0; the later protobuf pin is the NGC 26.05 images').
pin() {
  local spec
  spec=$(grep -iE "^$1==" requirements.txt | head -n 1 | sed 's/[;[:space:]].*//')
  [[ -n $spec ]] || { echo "pack.sh: $1 is not pinned in requirements.txt" >&2; return 1; }
  echo "$spec"
}

# What the preflight requires for the config set, and the GPU-host exporters' sources.
"$PY" -m builders.gpu_sources stage "$stage" --model-config-name "$CONFIG_SET"
mv "$stage/source-wheels.txt" "$out/"
source_wheels=()
while read -r name; do
  spec=$(pin "$name")
  source_wheels+=("$spec")
done < "$out/source-wheels.txt"

# The server: bin/, the Python backend and the one stub this Python needs.
wheels=$out/wheels
mkdir -p "$wheels"
download --no-deps -d "$wheels" "$(pin nvidia-pytriton)"
tmp=$(mktemp -d)
unzip -q "$wheels"/nvidia_pytriton-*.whl 'pytriton/tritonserver/*' 'nvidia_pytriton.libs/*' -d "$tmp"
find "$tmp/pytriton/tritonserver/python_backend_stubs" -mindepth 1 -maxdepth 1 \
  ! -name "$PYVER" -exec rm -rf {} +
rm -f "$tmp"/nvidia_pytriton.libs/libpython3*
: > "$tmp/pytriton/__init__.py"   # the launcher only needs the package's location
tar -C "$tmp" -cJf "$stage/server/server.tar.xz" pytriton nvidia_pytriton.libs
rm -rf "$tmp" "$wheels"
download --no-deps -d "$stage/server" "$(pin numpy)" "$(pin nvidia-cuda-runtime-cu12)"
# perf_analyzer links Debian's libb64.so.0d.
(cd "$stage/server" && apt-get download -q libb64-0d >/dev/null 2>&1 \
  && dpkg-deb -x libb64-0d_*.deb deb && cp deb/usr/lib/x86_64-linux-gnu/libb64.so.0d . \
  && rm -rf deb libb64-0d_*.deb)
[[ -f $stage/server/libb64.so.0d ]] || { echo "pack.sh: no libb64.so.0d (apt-get download)" >&2; exit 1; }
# wrk (Debian's, with its LuaJIT) drives bench-gpu's CTR rows: the Python load generator's one
# process tops out near 3,000 requests/s there (benchmarks/gpu/load.py).
(cd "$stage/server" && apt-get download -q wrk libluajit-5.1-2 >/dev/null 2>&1 \
  && for deb in wrk_*.deb libluajit-5.1-2_*.deb; do dpkg-deb -x "$deb" deb; done \
  && cp deb/usr/bin/wrk . && cp -L deb/usr/lib/x86_64-linux-gnu/libluajit-5.1.so.2 . \
  && rm -rf deb ./*.deb)
[[ -x $stage/server/wrk ]] || { echo "pack.sh: no wrk (apt-get download)" >&2; exit 1; }

# Wheels for the host's Python (installed with --no-deps: the lists are complete).
download --no-deps -d "$stage/site" tritonclient==2.51.0 "$(pin protobuf)" "$(pin pytest)" \
  "$(pin hypothesis)" python-rapidjson geventhttpclient gevent greenlet zope.event \
  zope.interface brotli certifi urllib3 pluggy iniconfig sortedcontainers "$(pin py-spy)" \
  "${source_wheels[@]}"
# The naive FastAPI server of bench-gpu (benchmarks/harness/naive_server.py: gunicorn with uvicorn
# workers), with whatever they depend on, resolved for Python 3.12.
download -d "$stage/site" "$(pin fastapi)" "$(pin uvicorn)" "$(pin gunicorn)" "$(pin uvicorn-worker)"

# infinity-emb, the embedding server bench-gpu's text rows are compared with, and what it needs
# beyond the host's PyTorch stack: installed by setup.sh into a folder of its own (it needs
# sentence-transformers < 4 and transformers < 5; benchmarks/infinity-requirements.txt).
mkdir -p "$stage/infinity"
download --no-deps -d "$stage/infinity" -r benchmarks/infinity-requirements.txt

"$PY" scripts/offline_gpu_host/parts.py "$stage" "$out" --budget-mib "$PART_MIB"
rm -rf "$stage"
du -sh "$out"/part*
