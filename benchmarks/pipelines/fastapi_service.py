"""A described pipeline as the FastAPI service a user would write instead: the baseline of
``make bench-pipelines``.

One process per worker, one route, built from the same description and functions as the served
pipeline: ``POST /<name>`` with a plain JSON body of the description's inputs, batch-first
(``{"FEATURES": [[0.5, ...]]}``), runs its preprocess function → one ONNX Runtime session per
worker on the checkout's built core ``model.onnx`` (CPU, the served core's settings: one
intra-op thread per core, no spinning) → its postprocess function, and answers the
description's outputs as JSON, batch-first (``{"CLICK_PROBABILITY": [[0.03]]}``).

Layout of the JSON, both ways: numbers and BOOL as nested lists; a BYTES input item as a base64
string (an encoded image is binary); a BYTES output item as its UTF-8 text (every described
pipeline's BYTES outputs are text: labels, JSON). A request the pipeline refuses (its
preprocess raises ``ValueError``) gets HTTP 400 with the message; a body that does not match the
inputs' nesting or types gets FastAPI's 422.

It is served the way FastAPI's deployment docs recommend ("Server Workers"): gunicorn with
uvicorn workers (``uvicorn_worker.UvicornWorker``), the app built once per worker at start-up,
a plain ``def`` route (FastAPI runs it in its thread pool). :class:`PipelineFastApi` starts it
with :class:`benchmarks.harness.naive_server.NaiveServer`'s process handling. Only stateless
pipelines
whose steps are functions (``[preprocess] function``) have this baseline.

With ``$PIPELINE_FASTAPI_DEVICE`` set (e.g. ``cuda:0``; :class:`PipelineFastApi`'s ``device``),
a core whose ``build()`` returns a torch module runs that module in eager PyTorch on the device
instead (:class:`TorchCore`): the GPU baseline of ``make bench-gpu``'s ``digit_scans`` rows.
"""

from __future__ import annotations

import base64
import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, create_model
from tritonclient.utils import triton_to_np_dtype

from benchmarks.harness.naive_server import NaiveServer
from builders.pipeline.in_process import InProcess
from tritonrepo.description import Pipeline, Tensor, import_ref, load
from tritonrepo.paths import MODEL_REPOSITORY, PIPELINES
from tritonrepo_format.config_sets import TORCH_GPU_SET

NAME_ENV = "PIPELINE_FASTAPI_NAME"  # the pipeline app_from_env() serves
DEVICE_ENV = "PIPELINE_FASTAPI_DEVICE"  # set: the saved torch module on this device (TorchCore)
APP = "benchmarks.pipelines.fastapi_service:app_from_env()"  # gunicorn's factory-call syntax


def describe(name: str) -> Pipeline:
    """``pipelines/<name>/pipeline.toml``, checked to have a FastAPI baseline.

    Raises:
        ValueError: the pipeline is stateful, a step is a step class, or its core has its own
            builder (no single ``model.onnx`` built from the description).
    """
    pipeline = load(PIPELINES / name / "pipeline.toml")
    if pipeline.session is not None or pipeline.preprocess.function is None:
        raise ValueError(f"{name}: only stateless pipelines with function steps have a baseline")
    if pipeline.postprocess.function is None or pipeline.core.builder is not None:
        raise ValueError(f"{name}: its postprocess or core is not described by functions")
    return pipeline


def model_file(pipeline: Pipeline) -> Path:
    """The built core ``model_repository/<core>/<first version>/model.onnx``."""
    core = pipeline.core
    return MODEL_REPOSITORY / core.model / str(core.versions[0]) / "model.onnx"


def session_options() -> Any:
    """ONNX Runtime options as the served core's ``configs/cpu.pbtxt``: intra-op threads 0
    (one per core), spinning off."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


class TorchCore(InProcess):
    """``pipeline`` around its core's saved torch module (``<core>/1/module.pt``, what
    ``make artifacts`` trained and ``make artifacts-gpu`` exports) in eager PyTorch on
    ``device``, under ``torch.inference_mode``: the FastAPI service a team serving its own module
    on a GPU writes. ``precision`` (``"fp16"``/``"fp32"``) is the served program's, read from
    its ``torch_metadata.json`` by :func:`program_precision`; float inputs are cast to it, float
    outputs back to FP32.

    Raises:
        FileNotFoundError: ``module.pt`` is missing (``make artifacts``).
    """

    def __init__(self, pipeline: Pipeline, device: str, precision: str) -> None:
        import torch

        from builders.torch_programs import described_export
        from tritonrepo_format.config_sets import config_path
        from tritonrepo_format.configs import load_config

        saved = described_export.load_module(
            described_export.module_path(MODEL_REPOSITORY, pipeline)
        )
        self.pipeline, self.device = pipeline, torch.device(device)
        self.dtype = {"fp16": torch.float16, "fp32": torch.float32}[precision]
        self.module = saved["module"].to(self.device, self.dtype).eval()
        self.inputs = list(saved["examples"])
        config = load_config(config_path(MODEL_REPOSITORY, pipeline.core.model, TORCH_GPU_SET))
        self.names = [o.name for o in config.output]
        self.pre = import_ref(pipeline.preprocess.function)
        self.post = import_ref(pipeline.postprocess.function)

    def core_feeds(self, pre_out: Mapping[str, Any]) -> dict[str, np.ndarray]:
        return {name: np.asarray(pre_out[name]) for name in self.inputs}

    def run_core(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        import torch

        with torch.inference_mode():
            args = [torch.as_tensor(feeds[n]).to(self.device) for n in self.inputs]
            args = [a.to(self.dtype) if a.is_floating_point() else a for a in args]
            out = self.module(*args)
            outs = out if isinstance(out, (tuple, list)) else (out,)
            return [(o.float() if o.is_floating_point() else o).cpu().numpy() for o in outs]


def program_precision(pipeline: Pipeline) -> str:
    """``"fp16"`` or ``"fp32"``: the precision of the core's built ``torch_gpu`` program.

    Raises:
        FileNotFoundError: the program is not built (``make artifacts-gpu``).
    """
    import json

    core = pipeline.core
    path = MODEL_REPOSITORY / core.model / str(core.versions[0]) / "torch_metadata.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: run `make artifacts-gpu`")
    return json.loads(path.read_text())["precision"]


def _item_type(tensor: Tensor) -> type:
    if tensor.dtype == "BYTES":
        return str
    if tensor.dtype == "BOOL":
        return bool
    return float if tensor.dtype.startswith(("FP", "BF")) else int


def request_model(pipeline: Pipeline) -> type[BaseModel]:
    """The pydantic body of the route: one field per input, a list nested ``1 + len(dims)``
    deep (batch first) of float, int, bool or str (BYTES: base64); optional inputs may be
    left out."""
    fields: dict[str, Any] = {}
    for tensor in pipeline.inputs:
        kind: Any = _item_type(tensor)
        for _ in range(1 + len(tensor.dims)):
            kind = list[kind]
        fields[tensor.name] = (kind | None, None) if tensor.optional else (kind, ...)
    return create_model(f"{pipeline.name}_request", **fields)


def _bytes_items(value: Any, decode: Any) -> np.ndarray:
    items = np.asarray(value, dtype=object)
    return np.frompyfunc(decode, 1, 1)(items).astype(object) if items.size else items


def to_arrays(body: Mapping[str, Any], pipeline: Pipeline) -> dict[str, np.ndarray]:
    """The JSON body's inputs as batch-first numpy arrays of the description's dtypes
    (BYTES: base64 decoded to bytes, dtype object); absent optional inputs left out.

    Raises:
        ValueError: a BYTES item is not valid base64, or the lists are ragged.
    """
    arrays = {}
    for tensor in pipeline.inputs:
        value = body.get(tensor.name)
        if value is None:
            continue
        if tensor.dtype == "BYTES":
            arrays[tensor.name] = _bytes_items(value, lambda s: base64.b64decode(s, validate=True))
        else:
            arrays[tensor.name] = np.asarray(value, dtype=triton_to_np_dtype(tensor.dtype))
    return arrays


def to_json(outputs: Mapping[str, np.ndarray], pipeline: Pipeline) -> dict[str, Any]:
    """The pipeline's outputs as JSON-ready nested lists (BYTES items as UTF-8 text)."""
    answer = {}
    for tensor in pipeline.outputs:
        value = np.asarray(outputs[tensor.name])
        if tensor.dtype == "BYTES":
            value = _bytes_items(value, lambda b: b.decode() if isinstance(b, bytes) else str(b))
        answer[tensor.name] = value.tolist()
    return answer


def request_json(inputs: Mapping[str, np.ndarray], pipeline: Pipeline) -> dict[str, Any]:
    """What a client sends: batch-first arrays as the route's JSON body (BYTES base64)."""
    body = {}
    for tensor in pipeline.inputs:
        if tensor.name not in inputs:
            continue
        value = np.asarray(inputs[tensor.name])
        if tensor.dtype == "BYTES":
            value = _bytes_items(value, lambda b: base64.b64encode(bytes(b)).decode("ascii"))
        body[tensor.name] = value.tolist()
    return body


def answer_arrays(answer: Mapping[str, Any], pipeline: Pipeline) -> dict[str, np.ndarray]:
    """A route's JSON answer as numpy arrays of the description's dtypes (BYTES: UTF-8
    encoded, dtype object), for comparing with the pipeline's own outputs."""
    arrays = {}
    for tensor in pipeline.outputs:
        value = answer[tensor.name]
        if tensor.dtype == "BYTES":
            arrays[tensor.name] = _bytes_items(value, lambda s: s.encode())
        else:
            arrays[tensor.name] = np.asarray(value, dtype=triton_to_np_dtype(tensor.dtype))
    return arrays


def create_app(name: str) -> FastAPI:
    """The FastAPI app of pipeline ``name``: ``POST /<name>`` (module docstring) and
    ``GET /health`` → ``{"ready": bool, "pid": int}``; the ONNX Runtime session is opened at
    start-up (lifespan), once per worker process.

    Raises:
        ValueError: as :func:`describe`.
    """
    pipeline = describe(name)
    state: dict[str, InProcess] = {}

    device = os.environ.get(DEVICE_ENV)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> Iterator[None]:
        if device:
            state["pipeline"] = TorchCore(pipeline, device, program_precision(pipeline))
        else:
            state["pipeline"] = InProcess(pipeline, model_file(pipeline), session_options())
        yield
        state.clear()

    runtime = f"PyTorch on {device}" if device else "ONNX Runtime"
    app = FastAPI(title=f"{name} (FastAPI + {runtime})", lifespan=lifespan)
    body_model = request_model(pipeline)

    @app.get("/health")
    def health() -> dict:
        return {"ready": "pipeline" in state, "pid": os.getpid()}

    def infer(body: BaseModel) -> dict:
        try:
            outputs = state["pipeline"](to_arrays(body.model_dump(), pipeline))
        except ValueError as exc:  # the preprocess function's refusal, bad base64, ragged lists
            raise HTTPException(400, str(exc)) from exc
        return to_json(outputs, pipeline)

    infer.__annotations__["body"] = body_model  # the description's body, not a string
    app.post(f"/{name}")(infer)
    return app


def app_from_env() -> FastAPI:
    """:func:`create_app` of the pipeline named by ``$PIPELINE_FASTAPI_NAME`` (for gunicorn)."""
    return create_app(os.environ[NAME_ENV])


def layouts(cores: int | None = None) -> list[int]:
    """Worker counts to measure: 1, 2 and one per core (``os.sched_getaffinity``), distinct."""
    cores = cores or len(os.sched_getaffinity(0))
    return sorted({1, 2, cores})


class PipelineFastApi(NaiveServer):
    """gunicorn with ``workers`` uvicorn workers serving :func:`create_app` of ``name`` on
    127.0.0.1:``port`` (with ``device``: the core's torch module there, :class:`TorchCore`),
    until every worker answers ``/health`` (``NaiveServer``'s start-up and stop); ``url`` is
    ``http://127.0.0.1:<port>``, the route ``/<name>``.

    Raises (on ``__enter__``):
        RuntimeError: the service did not start within ``startup_timeout_s`` (see ``log_file``).
    """

    def __init__(
        self,
        name: str,
        port: int,
        workers: int,
        log_file: Path,
        startup_timeout_s: float = 120,
        device: str | None = None,
    ) -> None:
        env = {NAME_ENV: name} | ({DEVICE_ENV: device} if device else {})
        super().__init__(name, port, workers, log_file, startup_timeout_s, app=APP, env=env)
