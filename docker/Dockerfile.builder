# Builder of the TensorRT plans: NVIDIA's TensorRT container of the serving image's release
# (NGC 26.05: TensorRT 10.x, Ubuntu 24.04, Python 3.12; 26.06 moved to TensorRT 11, which has
# no FP16/INT8 builder flags) plus the builders' Python dependencies, torch-free, versions
# from requirements.txt. The checkout is mounted, not copied: the plans are written
# into its model_repository/. A plan is tied to the TensorRT version and the GPU it was built
# on, so build them on the serving GPU (docker/README.md), after `make artifacts`:
#   make build-plans
# or by hand, from the repository root:
#   docker build -f docker/Dockerfile.builder -t tritonrepo-builder:26.05 .
#   docker run --gpus all --rm -v "$PWD:/workspace/tritonrepo" tritonrepo-builder:26.05 \
#       python -m builders.tensorrt.plans [--model NAME ...] [--precision fp16|int8]
ARG TENSORRT_IMAGE=nvcr.io/nvidia/tensorrt:26.05-py3
FROM ${TENSORRT_IMAGE}

SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# No __pycache__ written into the mounted checkout.
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1 HF_HUB_OFFLINE=1
WORKDIR /opt/tritonrepo-builder

# requirements.txt as constraints with its extras stripped (pip refuses constraints with
# extras); its environment markers pick the Python 3.12 builds (onnxruntime 1.32.0). TensorRT's
# own Python bindings come with the image. tritonclient[grpc] and protobuf: the model_config
# protobuf that builders/tensorrt/plan_config.py checks the plans against. tests/deploy/test_containers.py
# resolves this step for Python 3.12.
COPY requirements.txt ./
RUN sed -E 's/\[[^]]*\]//' requirements.txt \
    | pip install --no-cache-dir -c /dev/stdin polygraphy onnx numpy onnxruntime tokenizers \
        protobuf "tritonclient[grpc]" \
    && python3 -c "import tensorrt, polygraphy, onnx, onnxruntime, tokenizers, tritonclient.grpc" \
    && { command -v python >/dev/null || ln -s "$(command -v python3)" /usr/local/bin/python; }

# The checkout is mounted here; `python -m builders...` imports tritonrepo and builders from it.
WORKDIR /workspace/tritonrepo
CMD ["python", "-m", "builders.tensorrt.plans"]
