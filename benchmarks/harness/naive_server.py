"""What users run today: the same models behind FastAPI, one request at a time, no batching.

This is the baseline the Triton ensembles have to beat. It is written the way FastAPI's
documentation recommends: plain ``def`` endpoints for blocking model calls (FastAPI runs them
in its thread pool), pydantic request models, the model loaded once per worker at start-up, and
``uvicorn --workers N`` with one worker process per core ("Server Workers" in FastAPI's
deployment docs). ``NAIVE_SERVER_MODEL`` picks what a worker loads:

* ``text``: sentence-transformers all-MiniLM-L6-v2, ``POST /embed {"text": str}`` →
  ``{"embedding": [384 floats]}`` (``encode(normalize_embeddings=True)``);
* ``ctr``: the PyTorch CTR network (``build/ctr/model.pt``), ``POST /rank {"history": [...],
  "candidates": [...], "top_k": k}`` → ``{"item_ids": [...], "scores": [...]}``, and
  ``POST /session/{session_id}`` with ``{"item_id", "candidates", "start", "end"}`` for the
  session workload, whose histories live in the worker's memory (so a session server must run
  one worker: with several, a session's events would land on workers without its history).
  ``NAIVE_SERVER_DEVICE`` (default ``cpu``) is the PyTorch device it runs on, e.g. ``cuda``:
  each worker then holds its own copy of the network and its own CUDA context on that GPU,
  the rows are copied to it per request and the scores back.
* ``image``: EfficientNet-Lite0 in PyTorch (``reference_data.image_reference``), ``POST /classify``
  with the raw image file as the body → ``{"classes": [5 ImageNet ids], "scores": [...]}``,
  decoded and preprocessed by the served step's own function.

:class:`NaiveServer` starts it with uvicorn for the benchmark and waits until it answers.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path

from fastapi import FastAPI, HTTPException, Request
from pydantic import BaseModel

from tritonrepo.paths import BUILD_DIR, REPO_ROOT

MODEL_ENV = "NAIVE_SERVER_MODEL"
THREADS_ENV = "NAIVE_SERVER_TORCH_THREADS"  # set: torch.set_num_threads(n) in each worker
DEVICE_ENV = "NAIVE_SERVER_DEVICE"  # PyTorch device of the ctr model (default "cpu")
_state: dict = {}


class EmbedRequest(BaseModel):
    text: str


class RankRequest(BaseModel):
    history: list[int]
    candidates: list[int]
    top_k: int | None = None


class SessionEvent(BaseModel):
    item_id: int
    candidates: list[int]
    start: bool = False
    end: bool = False


@contextlib.asynccontextmanager
async def lifespan(_app: FastAPI) -> Iterator[None]:
    kind = os.environ.get(MODEL_ENV, "text")
    if os.environ.get(THREADS_ENV):
        import torch

        torch.set_num_threads(int(os.environ[THREADS_ENV]))
    if kind == "text":
        from sentence_transformers import SentenceTransformer

        from tritonrepo.text import spec

        _state["text"] = SentenceTransformer(str(spec.source_model_dir()), device="cpu")
    elif kind == "image":
        from reference_data.image_reference import efficientnet_lite0

        _state["image"] = efficientnet_lite0()
    else:
        from builders.onnx_export import ctr_network

        device = os.environ.get(DEVICE_ENV, "cpu")
        model = ctr_network.load(BUILD_DIR / "ctr" / "model.pt")
        if device != "cpu":
            import torch

            from tritonrepo.ctr import spec

            model = model.to(device)
            with torch.inference_mode():  # CUDA context and kernels ready before /health
                model(torch.zeros(1, spec.SEQ_LENGTH, dtype=torch.int64, device=device))
        _state["ctr"], _state["device"] = model, device
        _state["sessions"] = {}
    yield


app = FastAPI(lifespan=lifespan)


@app.get("/health")
def health() -> dict:
    return {"ready": bool(_state), "pid": os.getpid()}


@app.post("/classify")
async def classify(request: Request) -> dict:
    """The raw image file as the body → ``{"classes": [...], "scores": [...]}`` (top 5), with
    the served pipeline's preprocessing and postprocessing functions; a bad image gets 400."""
    from starlette.concurrency import run_in_threadpool

    data = await request.body()
    return await run_in_threadpool(_classify, data)


def _classify(data: bytes) -> dict:
    import torch

    from tritonrepo.image.postprocess import top_k
    from tritonrepo.image.preprocess import preprocess_image
    from tritonrepo.step.errors import InvalidRequest

    try:
        pixels = preprocess_image(data)
    except InvalidRequest as exc:
        raise HTTPException(400, str(exc)) from exc
    with torch.inference_mode():
        logits = _state["image"](torch.from_numpy(pixels[None])).numpy()
    indices, probs = top_k(logits, 5)
    return {"classes": indices[0].tolist(), "scores": probs[0].tolist()}


@app.post("/embed")
def embed(request: EmbedRequest) -> dict:
    vector = _state["text"].encode([request.text], normalize_embeddings=True)[0]
    return {"embedding": vector.tolist()}


def _rank(history: list[int], candidates: list[int], top_k: int | None) -> dict:
    import numpy as np
    import torch

    from tritonrepo.ctr.features import history_window, model_rows

    if not candidates:
        raise HTTPException(400, "candidates must not be empty")
    rows = torch.from_numpy(model_rows(history_window(np.asarray(history)), np.asarray(candidates)))
    if _state["device"] != "cpu":
        rows = rows.to(_state["device"])
    with torch.inference_mode():
        scores = _state["ctr"](rows).cpu().numpy().reshape(-1)
    order = np.argsort(-scores, kind="stable")[: top_k or len(candidates)]
    return {"item_ids": [candidates[i] for i in order], "scores": scores[order].tolist()}


@app.post("/rank")
def rank(request: RankRequest) -> dict:
    return _rank(request.history, request.candidates, request.top_k or 10)


@app.post("/session/{session_id}")
def session_event(session_id: str, event: SessionEvent) -> dict:
    sessions = _state["sessions"]
    if event.start:
        sessions[session_id] = []
    if session_id not in sessions:
        raise HTTPException(404, f"no session {session_id}; send start=true first")
    sessions[session_id].append(event.item_id)
    history = sessions[session_id]
    if event.end:
        del sessions[session_id]
    return _rank(history, event.candidates, None)


class NaiveServer:
    """``uvicorn benchmarks.harness.naive_server:app`` in a child process, for one benchmark system.

    Args:
        model: ``"text"`` or ``"ctr"`` (see the module docstring).
        port: TCP port on 127.0.0.1.
        workers: uvicorn worker processes (one per core is FastAPI's recommendation).
        log_file: where uvicorn's output goes.
        startup_timeout_s: seconds to wait for every worker to answer ``/health``.
        torch_threads: ``torch.set_num_threads`` in each worker (``None``: PyTorch's default,
            one thread per core in every worker, as a server set up from FastAPI's docs runs).
        device: PyTorch device of the ``ctr`` model in each worker (``"cpu"``, ``"cuda"``,
            ``"cuda:1"``); the other models run on the CPU.
        app: the ASGI app gunicorn loads (default: this module's).
        env: more environment variables of the service.
    """

    def __init__(
        self,
        model: str,
        port: int,
        workers: int,
        log_file: Path,
        startup_timeout_s: float = 180,
        torch_threads: int | None = None,
        device: str = "cpu",
        app: str = "benchmarks.harness.naive_server:app",
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.model, self.port, self.workers = model, port, workers
        self.app, self.env = app, dict(env or {})
        self.device = device
        self.log_file, self.startup_timeout_s = log_file, startup_timeout_s
        self.torch_threads = torch_threads
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> NaiveServer:
        env = dict(
            os.environ, **{MODEL_ENV: self.model, DEVICE_ENV: self.device}, HF_HUB_OFFLINE="1"
        )
        if self.torch_threads:
            env[THREADS_ENV] = str(self.torch_threads)
        env.update(self.env)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "wb") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "gunicorn",
                    self.app,
                    "--worker-class",
                    "uvicorn_worker.UvicornWorker",
                    "--bind",
                    f"127.0.0.1:{self.port}",
                    "--workers",
                    str(self.workers),
                    "--timeout",
                    "300",
                    "--log-level",
                    "warning",
                ],
                cwd=REPO_ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + self.startup_timeout_s
        ready: set[int] = set()  # pids of workers that answered: wait until each has loaded
        while len(ready) < self.workers:
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError(f"naive {self.model} server did not start; see {self.log_file}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=5) as answer:
                    state = json.loads(answer.read())
                if state["ready"]:
                    ready.add(state["pid"])
            except OSError:
                time.sleep(0.5)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
