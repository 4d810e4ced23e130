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
	model_repository/text_embedding_tokenize/1/tokenizer.json

# Artifacts of ctr_ranking / ctr_session (trained on the synthetic click log, ~3 min on CPU).
CTR_ARTIFACTS := \
	model_repository/ctr_model/1/model.onnx \
	model_repository/ctr_model/1/build_metadata.json \
	model_repository/ctr_model/2/model.onnx \
	model_repository/ctr_model/2/build_metadata.json \
	build/ctr/model.pt

SERVE_ARGS ?=
PYTEST_ARGS ?=

BENCH_ARGS ?=

.PHONY: help setup artifacts serve test bench lint clean

help:
	@echo "make serve     set up, build the artifacts, run the embedded Triton server (Ctrl-C stops)"
	@echo "make test      set up, build the artifacts, run the tests against a real server"
	@echo "make setup     create $(VENV) with the versions pinned in requirements.txt"
	@echo "make artifacts build the model files from the source weights"
	@echo "make bench     dynamic-batching gain of text_embedding with perf_analyzer"
	@echo "make lint      ruff check + ruff format --check"
	@echo "make clean     remove built artifacts and build/ (keeps $(VENV))"

setup: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps --editable .
	touch $@

artifacts: $(TEXT_EMBEDDING_ARTIFACTS) $(CTR_ARTIFACTS)

$(TEXT_EMBEDDING_ARTIFACTS) &: $(STAMP) builders/text_embedding_onnx.py tritonrepo/text/spec.py \
		tritonrepo/text/tokenization.py
	$(PY) -m builders.text_embedding_onnx

$(CTR_ARTIFACTS) &: $(STAMP) builders/ctr_onnx.py builders/ctr_network.py tritonrepo/ctr/spec.py \
		tritonrepo/ctr/click_log.py tritonrepo/ctr/features.py
	$(PY) -m builders.ctr_onnx

serve: artifacts
	$(PY) -m tritonrepo.launcher $(SERVE_ARGS)

test: artifacts
	$(PY) -m pytest $(PYTEST_ARGS)

# perf_analyzer 2.51 links Debian's libb64 (libb64-0d); install it when missing.
bench: artifacts
	@/sbin/ldconfig -p | grep -q 'libb64\.so\.0d' || apt-get install -y -q libb64-0d >/dev/null \
		|| { echo "error: perf_analyzer needs Debian's libb64-0d (apt-get install libb64-0d)"; exit 1; }
	$(PY) -m benchmarks.text_embedding_batching $(BENCH_ARGS)

lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

clean:
	rm -rf build $(TEXT_EMBEDDING_ARTIFACTS) $(CTR_ARTIFACTS)
