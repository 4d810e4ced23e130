# Two commands matter:  `make serve` (set up, build, serve until Ctrl-C)  and  `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1

# Artifacts of text_embedding (git-ignored, built from the source weights).
TEXT_EMBEDDING_ARTIFACTS := \
	model_repository/text_embedding_encoder/1/model.onnx \
	model_repository/text_embedding_encoder/1/build_metadata.json \
	model_repository/text_embedding_encoder/2/model.onnx \
	model_repository/text_embedding_encoder/2/build_metadata.json \
	model_repository/text_embedding_encoder/3/model.onnx \
	model_repository/text_embedding_encoder/3/build_metadata.json \
	model_repository/text_embedding_encoder/4/model.onnx \
	model_repository/text_embedding_encoder/4/build_metadata.json \
	model_repository/text_embedding_tokenize/1/tokenizer.json

# Artifacts of ctr_ranking / ctr_session (trained on the synthetic click log, ~3 min on CPU).
CTR_ARTIFACTS := \
	model_repository/ctr_model/1/model.onnx \
	model_repository/ctr_model/1/build_metadata.json \
	model_repository/ctr_model/2/model.onnx \
	model_repository/ctr_model/2/build_metadata.json \
	build/ctr/model.pt

# What the TensorRT plans are built from besides those (make build-plans reads them from the
# mounted checkout): the ctr_session step graph and the real texts of calibration and gate.
PLAN_SOURCES := model_repository/ctr_session/1/model.onnx build/tensorrt/real_texts.json

SERVE_ARGS ?=
PYTEST_ARGS ?=

BENCH_ARGS ?=
SOAK_MINUTES ?= 10

.PHONY: help setup artifacts serve test bench bench-quick profile perf-deps int8-study lint clean soak \
	artifacts-gpu test-gpu bench-gpu build-plans serve-gpu

help:
	@echo "make serve     set up, build the artifacts, run the embedded Triton server (Ctrl-C stops)"
	@echo "make test      set up, build the artifacts, run the tests against a real server"
	@echo "make setup     create $(VENV) with the versions pinned in requirements.txt"
	@echo "make artifacts build the model files from the source weights"
	@echo "make bench     the ensembles vs in-process and FastAPI baselines (~25 min; build/bench/)"
	@echo "make bench-quick  the same harness, a few seconds per system (what CI runs)"
	@echo "make soak      one server, mixed traffic for SOAK_MINUTES (10); leak checks (build/soak/)"
	@echo "make profile   py-spy + Triton per-step statistics of text_embedding under load"
	@echo "make int8-study   compare INT8 candidates for the text encoder (build/int8_study.md)"
	@echo "make artifacts-gpu  on a GPU host: export the torch_gpu programs (FP16, accuracy-gated)"
	@echo "make test-gpu  on a GPU host: the torch_gpu config set against a real server"
	@echo "make bench-gpu on a GPU host: served text_embedding vs sentence-transformers FP16"
	@echo "make build-plans  Docker + GPU: TensorRT plans built on this GPU in the builder image"
	@echo "make serve-gpu    Docker + GPU: NVIDIA's Triton container (docker/compose.yaml)"
	@echo "make lint      ruff check + ruff format --check"
	@echo "make clean     remove built artifacts and build/ (keeps $(VENV))"

setup: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps --editable .
	touch $@

artifacts: $(TEXT_EMBEDDING_ARTIFACTS) $(CTR_ARTIFACTS) $(PLAN_SOURCES)

$(TEXT_EMBEDDING_ARTIFACTS) &: $(STAMP) builders/text_embedding_onnx.py tritonrepo/text/spec.py \
		tritonrepo/text/tokenization.py builders/text_embedding_variants.py tritonrepo/text/corpus.py
	$(PY) -m builders.text_embedding_onnx

$(CTR_ARTIFACTS) &: $(STAMP) builders/ctr_onnx.py builders/ctr_network.py tritonrepo/ctr/spec.py \
		tritonrepo/ctr/click_log.py tritonrepo/ctr/features.py
	$(PY) -m builders.ctr_onnx

model_repository/ctr_session/1/model.onnx: $(CTR_ARTIFACTS) builders/ctr_session_onnx.py
	$(PY) -m builders.ctr_session_onnx

build/tensorrt/real_texts.json: $(STAMP) builders/plan_data.py tritonrepo/text/corpus.py
	$(PY) -m builders.plan_data

serve: artifacts
	$(PY) -m tritonrepo.serve $(SERVE_ARGS)

test: artifacts perf-deps
	$(PY) -m pytest $(PYTEST_ARGS)

# perf_analyzer 2.51 (tritonclient wheel) links Debian's libb64 (libb64-0d); install it when
# missing (as root, as on CI and the dev machines).
perf-deps:
	@/sbin/ldconfig -p | grep -q 'libb64\.so\.0d' || apt-get install -y -q libb64-0d >/dev/null \
		|| { apt-get update -q >/dev/null && apt-get install -y -q libb64-0d >/dev/null; } \
		|| { echo "error: perf_analyzer needs Debian's libb64-0d (apt-get install libb64-0d)"; exit 1; }

bench: artifacts perf-deps
	$(PY) -m benchmarks $(BENCH_ARGS)

bench-quick: artifacts perf-deps
	$(PY) -m benchmarks --quick $(BENCH_ARGS)

soak: artifacts
	$(PY) -m benchmarks.soak --minutes $(SOAK_MINUTES)

profile: artifacts perf-deps
	$(PY) -m benchmarks.profile $(BENCH_ARGS)

int8-study: artifacts
	$(PY) -m builders.text_embedding_int8_study

# GPU host without NVIDIA's container: the torch_gpu config set (--model-config-name=torch_gpu).
# The programs are tied to this host's PyTorch, like TensorRT plans to theirs, so they are built
# here, not shipped (builders/torch_export.py).
TORCH_GPU_ARTIFACTS := \
	model_repository/text_embedding_encoder/1/model.pt2 \
	model_repository/ctr_model/1/model.pt2

artifacts-gpu: $(TORCH_GPU_ARTIFACTS)

$(TORCH_GPU_ARTIFACTS) &: $(TEXT_EMBEDDING_ARTIFACTS) $(CTR_ARTIFACTS) builders/torch_export.py
	$(PY) -m builders.torch_export

test-gpu: artifacts-gpu perf-deps
	$(PY) -m pytest -m gpu $(PYTEST_ARGS)

bench-gpu: artifacts-gpu perf-deps
	$(PY) -m benchmarks.gpu $(BENCH_ARGS)

# NVIDIA's containers (docker/README.md; needs Docker and the NVIDIA Container Toolkit, so not
# run on the development machines or CI). Plans are tied to TensorRT version and GPU: build them
# on the serving GPU, in the TensorRT image of the serving image's release, as your user.
BUILDER_IMAGE ?= tritonrepo-builder:24.10
PLAN_ARGS ?=

build-plans: artifacts
	docker build -f docker/Dockerfile.builder -t $(BUILDER_IMAGE) .
	docker run --gpus all --rm --user "$$(id -u):$$(id -g)" -e HOME=/tmp \
		-v "$(CURDIR):/workspace/tritonrepo" $(BUILDER_IMAGE) \
		python -m builders.tensorrt_plans $(PLAN_ARGS)

# The repository key is a compose secret read from build/repository.key (created if missing).
serve-gpu:
	@test -s build/repository.key || { mkdir -p build && umask 077 && $(PYTHON) -c \
		'import secrets; print(secrets.token_urlsafe(32))' > build/repository.key; }
	docker compose -f docker/compose.yaml up

lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

clean:
	rm -rf build $(TEXT_EMBEDDING_ARTIFACTS) $(CTR_ARTIFACTS) $(TORCH_GPU_ARTIFACTS) $(PLAN_SOURCES)
