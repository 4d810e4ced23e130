# Two commands matter:  `make serve` (set up, build, serve until Ctrl-C)  and  `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1

# What the TensorRT plans are built from besides the cores (make build-plans reads it from the
# mounted checkout): the real texts of the text encoder's calibration and gate.
PLAN_SOURCES := build/tensorrt/real_texts.json

SERVE_ARGS ?=
PYTEST_ARGS ?=

BENCH_ARGS ?=
SOAK_MINUTES ?= 10

.PHONY: help setup artifacts pipeline-artifacts pipeline version gpu-pack serve test test-unit bench bench-quick bench-priority bench-pipelines bench-smoke bench-tails fallback-cpu fallback-gpu profile perf-deps int8-study lint clean soak \
	k8s-deps k8s-validate monitoring-deps guard-deps \
	artifacts-gpu test-gpu bench-gpu build-plans serve-gpu

help:
	@echo "make serve     set up, build the artifacts, run the embedded Triton server (Ctrl-C stops)"
	@echo "make serve MODELS=x  build only pipeline x (and what it calls), serve only x"
	@echo "make test      set up, build the artifacts, run the tests against a real server"
	@echo "make test-unit the tests that need no server and no artifacts (tests/unit, < 1 min)"
	@echo "make setup     create $(VENV) with the versions pinned in requirements.txt"
	@echo "make artifacts build the model files from the source weights"
	@echo "make pipeline NAME=x  generate pipeline x from pipelines/x/pipeline.toml (docs/models/add_your_own_model.md)"
	@echo "make version NAME=x VERSION=2  build version 2 of pipeline x's core from its description, staged for a rollout"
	@echo "make bench     the ensembles vs in-process and FastAPI baselines (~25 min; build/bench/)"
	@echo "make bench-quick  the same harness, a few seconds per system (what CI runs)"
	@echo "make bench-priority  real-time requests under a bulk flood, with and without priority"
	@echo "make bench-pipelines  described pipelines: lines written, time to first answer, served vs in-process and FastAPI (~8 min)"
	@echo "make bench-smoke  guard vs Triton's own port vs FastAPI on one small pipeline, ratios only (~40 s; CI runs it)"
	@echo "make bench-tails  the shipped ensembles' p50/p99/max at concurrency 1, 4, 16 (~3 min)"
	@echo "make fallback-cpu  switch a running server to the CPU configs, no downtime (URL=...)"
	@echo "make fallback-gpu  ... and back to GPU_CONFIGS (default: config.pbtxt, TensorRT)"
	@echo "make soak      one server, mixed traffic for SOAK_MINUTES (10); leak checks (build/soak/)"
	@echo "make profile   py-spy + Triton per-step statistics of text_embedding under load"
	@echo "make int8-study   compare INT8 candidates for the text encoder (build/int8_study.md)"
	@echo "make artifacts-gpu  on a GPU host: export the torch_gpu programs (FP16, accuracy-gated)"
	@echo "make gpu-pack   here: pack what an offline GPU host needs (scripts/offline_gpu_host)"
	@echo "make test-gpu  on a GPU host: the torch_gpu config set against a real server"
	@echo "make bench-gpu on a GPU host: text, image and CTR served vs in-process and FastAPI"
	@echo "make build-plans  Docker + GPU: TensorRT plans built on this GPU in the builder image"
	@echo "make serve-gpu    Docker + GPU: NVIDIA's Triton container (docker/compose.yaml)"
	@echo "make k8s-validate  render deploy/kubernetes/ (kubectl kustomize), validate the schemas"
	@echo "make guard-deps  install nginx + njs for the HTTP guard (apt, as root; make test/serve do)"
	@echo "make lint      ruff check + ruff format --check"
	@echo "make clean     remove built artifacts and build/ (keeps $(VENV))"

setup: $(STAMP)

# uv installs what requirements.txt pins (~130 packages, 2.4 GB in .venv, torch the largest):
# make setup took 20 s on a fresh clone of a 2-core machine, 69 s with pip (2026-12-06), from the
# sources pip is configured with (scripts/uv_sources.py passes them on: uv reads no pip.conf).
# pip installs instead where pip's settings have no uv equivalent or uv fails.
UV := $(VENV)/bin/uv
$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "installing the $$(grep -oE '^[A-Za-z0-9_.-]+' requirements.txt | sort -u | wc -l)" \
		"packages pinned in requirements.txt and their dependencies into $(VENV)" \
		"(under a minute the first time)"
	$(PY) -m pip install --quiet "$$(grep -oE '^uv==[^ ;]+' requirements.txt)"
	if sources=$$($(PY) scripts/uv_sources.py) && eval "$(UV) pip install --python $(PY) $$sources -r requirements.txt" \
		&& eval "$(UV) pip install --python $(PY) $$sources --no-deps $$(sed -n 's/^# no-deps: *//p' requirements.txt)"; then :; \
	else \
		echo "installing with pip instead of uv"; \
		$(PY) -m pip install --no-compile --progress-bar on -r requirements.txt \
		&& $(PY) -m pip install --quiet --no-deps $$(sed -n 's/^# no-deps: *//p' requirements.txt); \
	fi
	$(PY) -m pip install --quiet --no-deps --editable .
	touch $@

artifacts: pipeline-artifacts $(PLAN_SOURCES)

# The core models of every pipeline (pipelines/*/pipeline.toml, builders/pipeline/build.py), a
# pipeline after those whose models it calls, the `builder` modules (each a process of its own,
# the CTR training among them) one after another beside the other pipelines (--one-lane: one at
# a time): each is rebuilt only when its description or code
# changed (a digest in its build_metadata.json), or, for a `builder` module (the shipped cores:
# text_embedding's encoder versions and tokenizer, ctr_ranking's CTR model (~3 min), ctr_session's
# stateful graph, image_classification's EfficientNet-Lite0 FP32 + INT8 and ResNet-50, ~1 min),
# when the module or what it imports changed or a file it makes is missing (a stamp in
# build/pipeline-builds/, builders/pipeline/module_build.py).
pipeline-artifacts: $(STAMP)
	$(PY) -m builders.pipeline.build

# A later version of a described pipeline's core, staged for a rollout (not served until one):
# make version NAME=my_model VERSION=2 [VERSION_ARGS=--force]
VERSION ?=
version: $(STAMP)
	@test -n "$(NAME)" -a -n "$(VERSION)" || { echo "usage: make version NAME=<pipeline> VERSION=<n>"; exit 2; }
	$(PY) -m builders.pipeline.build $(NAME) --version $(VERSION) $(VERSION_ARGS)

# Generate (or regenerate) a described pipeline's models: make pipeline NAME=my_model [NEW_ARGS=--force]
NAME ?=
NEW_ARGS ?=
pipeline: $(STAMP)
	@test -n "$(NAME)" || { echo "usage: make pipeline NAME=<pipelines/NAME/pipeline.toml>"; exit 2; }
	$(PY) -m builders.pipeline.generate pipeline $(NAME) $(NEW_ARGS)

build/tensorrt/real_texts.json: $(STAMP) builders/tensorrt/plan_data.py reference_data/text_corpus.py
	$(PY) -m builders.tensorrt.plan_data

# make serve MODELS="my_model ...": build only those pipelines and the ones whose models they
# call (python -m builders.pipeline.build --with-calls), not every shipped model, then serve
# only them (the launcher loads what they call). Without MODELS: every model, built first.
MODELS ?=
serve: $(if $(strip $(MODELS)),$(STAMP),artifacts) guard-deps
ifeq ($(strip $(MODELS)),)
	$(PY) -m tritonrepo.server.serve $(SERVE_ARGS)
else
	$(PY) -m builders.pipeline.build --with-calls $(MODELS)
	$(PY) -m tritonrepo.server.serve $(addprefix --model ,$(MODELS)) $(SERVE_ARGS)
endif

# The test files run on TEST_WORKERS pytest-xdist workers, a file on one worker with its servers
# (--dist loadfile), handed out longest first as tests/conftest.py orders them from the seconds
# measured per file (tests/data/file_seconds.json; --no-loadscope-reorder keeps that order,
# which pytest-xdist 3.8 would otherwise replace by the number of tests per file);
# TEST_WORKERS=0 runs them all in one process. Three on a 2-core machine: the tests wait on
# servers (loads, restarts, deadlines) for much of their time, and a third worker fills it.
TEST_WORKERS ?= 3
# Builds and tests run several PyTorch processes on the same cores (the two build lanes' trainings,
# the test workers' references and CPU exports): OpenMP threads that spin while they wait then
# take the cores from each other. Two CTR trainings side by side on 2 cores, 2 threads each: 0.99 s
# a step with spinning (OpenMP's default), 0.42 s with OMP_WAIT_POLICY=PASSIVE; one alone: 0.25
# vs 0.24 s (2026-12-06). make serve and make bench keep OpenMP's default.
artifacts pipeline-artifacts version test test-unit: export OMP_WAIT_POLICY = PASSIVE
test: artifacts perf-deps k8s-deps monitoring-deps guard-deps
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

# No server, no artifacts (tests/unit/, under a minute): what to run after a change to the logic.
test-unit: setup
	$(PY) -m pytest -q tests/unit $(PYTEST_ARGS)

# CPU fallback of a running server (`make serve`, or the container's ports with URL=host:port):
# every loaded model reloaded with configs/cpu.pbtxt through the load API, model by model, with
# a health check first and probes after each (tritonrepo_client/control/config_sets.py); `make fallback-gpu` goes
# back to GPU_CONFIGS (default: config.pbtxt, the TensorRT plans; or torch_gpu).
URL ?= 127.0.0.1:8000
GPU_CONFIGS ?= default

fallback-cpu: setup
	$(PY) -m tritonrepo_client --url $(URL) configs use cpu

fallback-gpu: setup
	$(PY) -m tritonrepo_client --url $(URL) configs use $(GPU_CONFIGS)

# perf_analyzer 2.51 (tritonclient wheel) links Debian's libb64 (libb64-0d); install it when
# missing (as root, as on CI and the dev machines).
perf-deps:
	@/sbin/ldconfig -p | grep -q 'libb64\.so\.0d' || apt-get install -y -q libb64-0d >/dev/null \
		|| { apt-get update -q >/dev/null && apt-get install -y -q libb64-0d >/dev/null; } \
		|| { echo "error: perf_analyzer needs Debian's libb64-0d (apt-get install libb64-0d)"; exit 1; }
	@command -v wrk >/dev/null || apt-get install -y -q wrk >/dev/null \
		|| { apt-get update -q >/dev/null && apt-get install -y -q wrk >/dev/null; } \
		|| { echo "error: make bench-pipelines needs Debian's wrk (apt-get install wrk)"; exit 1; }

# tests/deploy/test_monitoring.py runs Debian's prometheus and promtool (2.42) against the rules in
# deploy/prometheus/; install them when missing (as root). The package's own service is not used
# (the test runs its own process on a free port); apt may leave it stopped or running.
monitoring-deps:
	@command -v promtool >/dev/null && command -v prometheus >/dev/null \
		|| apt-get install -y -q --no-install-recommends prometheus >/dev/null \
		|| { apt-get update -q >/dev/null \
			&& apt-get install -y -q --no-install-recommends prometheus >/dev/null; } \
		|| { echo "error: tests/deploy/test_monitoring.py needs Debian's prometheus package" \
			"(prometheus and promtool; apt-get install prometheus)"; exit 1; }

# The HTTP guard in front of Triton's HTTP port (tritonrepo/server/http_guard.py) runs Debian's nginx
# with its njs module (libnginx-mod-http-js); install them when missing (as root). apt does not
# start the package's own nginx service in containers (policy-rc.d); the guard runs its own.
guard-deps:
	@{ command -v nginx >/dev/null || test -x /usr/sbin/nginx; } \
		&& test -f /usr/lib/nginx/modules/ngx_http_js_module.so \
		|| apt-get install -y -q --no-install-recommends nginx libnginx-mod-http-js >/dev/null \
		|| { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends \
			nginx libnginx-mod-http-js >/dev/null; } \
		|| { echo "error: the HTTP guard needs Debian's nginx and libnginx-mod-http-js" \
			"(apt-get install nginx libnginx-mod-http-js)"; exit 1; }

# deploy/kubernetes/ is rendered with `kubectl kustomize` (tests/deploy/test_kubernetes.py). kubectl
# comes with these machines' image; elsewhere `apt-get install kubectl` where an apt source
# has it. The check is that it renders an overlay: kubectl 1.27-1.33 (kustomize v5) render them
# identically; Debian bookworm's own kubernetes-client (1.20, kustomize v2) is too old.
k8s-deps:
	@kubectl kustomize deploy/kubernetes/overlays/cpu >/dev/null 2>&1 \
		|| { apt-get install -y -q kubectl >/dev/null 2>&1 \
			|| { apt-get update -q >/dev/null && apt-get install -y -q kubectl >/dev/null 2>&1; }; \
			kubectl kustomize deploy/kubernetes/overlays/cpu >/dev/null; } \
		|| { echo "error: deploy/kubernetes needs kubectl >= 1.27 (kustomize v5) on PATH, and" \
			"apt-get gave none that renders it: install kubectl from Kubernetes' packages"; exit 1; }

# Each kustomization rendered and validated strictly (unknown fields are errors) against the
# oldest and newest Kubernetes the manifests are for; the CRD objects (KServe, PodMonitor) get
# a warning from kubernetes-validate, which has no schemas for them, and are checked by
# tests/deploy/test_kubernetes.py, which this runs too.
K8S_KUSTOMIZATIONS := overlays/gpu overlays/cpu kserve prometheus-adapter argo-rollouts
K8S_VERSIONS := 1.29.0 1.37.0

k8s-validate: setup k8s-deps
	@set -eo pipefail; for k in $(K8S_KUSTOMIZATIONS); do for v in $(K8S_VERSIONS); do \
		echo "kubectl kustomize deploy/kubernetes/$$k | kubernetes-validate --strict -k $$v"; \
		kubectl kustomize deploy/kubernetes/$$k \
			| $(VENV)/bin/kubernetes-validate --strict --quiet -k $$v -; \
	done; done
	$(PY) -m pytest -q tests/deploy/test_kubernetes.py

bench: artifacts perf-deps guard-deps
	$(PY) -m benchmarks $(BENCH_ARGS)
	$(PY) -m benchmarks.serving.priority

# Real-time vs bulk priority under a flood (~3 min; build/bench/priority.md); part of make bench.
bench-priority: artifacts
	$(PY) -m benchmarks.serving.priority

bench-quick: artifacts perf-deps guard-deps
	$(PY) -m benchmarks --quick $(BENCH_ARGS)

# Described pipelines (pipelines/*/pipeline.toml): lines written, description to first served
# answer, served (HTTP guard) vs in-process and vs FastAPI + gunicorn (~8 min; build/bench/pipelines/).
bench-pipelines: artifacts perf-deps guard-deps
	$(PY) -m benchmarks.pipelines $(BENCH_ARGS)

# A small described pipeline through the HTTP guard vs Triton's own port and vs its FastAPI
# service, a few seconds each (~40 s): exit 1 only on a gross regression (CI runs it after the
# tests; benchmarks/serving/ratio_smoke.py gives the floors).
bench-smoke: artifacts perf-deps guard-deps
	$(PY) -m benchmarks.serving.ratio_smoke $(BENCH_ARGS)

# The shipped ensembles' latency tail at concurrency 1, 4 and 16 (~3 min; add
# BENCH_ARGS=--priorities for the tail a queue policy gives): benchmarks/serving/ensemble_tails.py.
bench-tails: artifacts perf-deps guard-deps
	$(PY) -m benchmarks.serving.ensemble_tails $(BENCH_ARGS)

soak: artifacts
	$(PY) -m benchmarks.serving.soak --minutes $(SOAK_MINUTES)

profile: artifacts perf-deps
	$(PY) -m benchmarks.ensembles.profile $(BENCH_ARGS)

int8-study: artifacts
	$(PY) -m builders.gates.int8_study

# GPU host without NVIDIA's container: the torch_gpu config set (--model-config-name=torch_gpu).
# The programs are tied to this host's PyTorch, like TensorRT plans to theirs, so they are built
# here, not shipped (builders/torch_programs/export.py).
# The programs: version 1 of every model whose configs/torch_gpu.pbtxt runs the torch_python
# backend (the models builders/torch_programs/export.py exports, read from the same configs).
TORCH_GPU_ARTIFACTS := $(patsubst %/configs/torch_gpu.pbtxt,%/1/model.pt2,\
	$(shell grep -l '^backend: *"torch_python"' model_repository/*/configs/torch_gpu.pbtxt))

artifacts-gpu: $(TORCH_GPU_ARTIFACTS)

$(TORCH_GPU_ARTIFACTS) &: $(wildcard build/pipeline-builds/*.json) \
		builders/torch_programs/export.py builders/torch_programs/image_export.py | pipeline-artifacts
	$(PY) -m builders.torch_programs.export

# Parts for an offline GPU host without registry access (scripts/offline_gpu_host/pack.sh,
# which needs the package registry here): what preflight requires for the torch_gpu set.
gpu-pack: artifacts
	PY=$(PY) bash scripts/offline_gpu_host/pack.sh

test-gpu: artifacts-gpu perf-deps
	$(PY) -m pytest -m gpu $(PYTEST_ARGS)

bench-gpu: artifacts-gpu perf-deps
	$(PY) -m benchmarks.gpu $(BENCH_ARGS)

# NVIDIA's containers (docker/README.md; needs Docker and the NVIDIA Container Toolkit, so not
# run on the development machines or CI). Plans are tied to TensorRT version and GPU: build them
# on the serving GPU, in the TensorRT image of the serving image's release, as your user.
BUILDER_IMAGE ?= tritonrepo-builder:26.05
PLAN_ARGS ?=

build-plans: artifacts
	docker build -f docker/Dockerfile.builder -t $(BUILDER_IMAGE) .
	docker run --gpus all --rm --user "$$(id -u):$$(id -g)" -e HOME=/tmp \
		-v "$(CURDIR):/workspace/tritonrepo" $(BUILDER_IMAGE) \
		python -m builders.tensorrt.plans $(PLAN_ARGS)

# The repository key is a compose secret read from build/repository.key (created if missing).
serve-gpu:
	@test -s build/repository.key || { mkdir -p build && umask 077 && $(PYTHON) -c \
		'import secrets; print(secrets.token_urlsafe(32))' > build/repository.key; }
	docker compose -f docker/compose.yaml up

lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

clean:
	test ! -x $(PY) || rm -f $$($(PY) -m builders.pipeline.build --list-built)
	rm -rf build $(TORCH_GPU_ARTIFACTS) $(PLAN_SOURCES)
