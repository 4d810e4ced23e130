"""The embedding server a team would deploy instead of ``text_embedding``: ``infinity-emb``
(github.com/michaelfeil/infinity; an OpenAI-compatible ``POST /embeddings`` server with its own
dynamic batching), for ``make bench-gpu``'s text rows.

It runs the same all-MiniLM-L6-v2 weights from their local folder
(``tritonrepo.text.spec.source_model_dir``) with its ``torch`` engine on the same GPU, in FP16,
with its default batch size (32) and its per-request access log off (``--log-level warning``,
as Triton logs no request by default). It needs sentence-transformers < 4 and transformers < 5, so
it cannot share this project's environment: ``make gpu-pack`` carries the wheels of
``benchmarks/infinity-requirements.txt`` and ``scripts/offline_gpu_host/setup.sh`` installs them
into a folder of their own, which :func:`infinity` puts alone on the infinity-emb process's
``PYTHONPATH`` (``TRITONREPO_INFINITY_SITE``). It runs with this interpreter (or
``TRITONREPO_INFINITY_PYTHON``), so with the host's PyTorch, scipy and scikit-learn: infinity-emb
declares numpy < 2 but ran with the H200 image's numpy 2.5; under the stubs' numpy 1.26 it did
not start, because transformers imports the image's scikit-learn, which is built for numpy 2
(``cannot import name 'GenerationMixin'``).

Interface: :func:`installed` (whether it can run here, and if not why), :func:`infinity` (the
running server) and :func:`embed` (its answers, for the accuracy check before timing).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

SITE_ENV = "TRITONREPO_INFINITY_SITE"
PYTHON_ENV = "TRITONREPO_INFINITY_PYTHON"
SERVED_NAME = "all-MiniLM-L6-v2"
PATH = "/embeddings"
START_TIMEOUT_S = 240.0  # import, model load and its warm-up on a cold host
INSTALL = (
    "make gpu-pack carries it to the GPU host (scripts/offline_gpu_host/setup.sh installs it "
    f"and sets ${SITE_ENV}); elsewhere: pip install --target DIR -r "
    f"benchmarks/infinity-requirements.txt and set {SITE_ENV}=DIR"
)


def _site() -> str | None:
    return os.environ.get(SITE_ENV) or None


def _python() -> str:
    return os.environ.get(PYTHON_ENV) or sys.executable


def _env() -> dict[str, str]:
    """The infinity-emb process's environment: its own folder alone on ``PYTHONPATH``, offline,
    no usage statistics sent."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(
        PYTHONPATH=_site() or "",
        HF_HUB_OFFLINE="1",
        INFINITY_ANONYMOUS_USAGE_STATS="0",
        DO_NOT_TRACK="1",
    )
    return env


def installed() -> str | None:
    """None when infinity-emb imports in its folder with its interpreter, else why not."""
    if _site() is None:
        return f"${SITE_ENV} is not set: {INSTALL}"
    done = subprocess.run(
        [_python(), "-c", "import infinity_emb; print(infinity_emb.__version__)"],
        env=_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    if done.returncode != 0:
        return f"infinity-emb does not import: {done.stderr.strip().splitlines()[-1:]}"
    return None


def version() -> str:
    """infinity-emb's version, as its own package reports it."""
    done = subprocess.run(
        [_python(), "-c", "import infinity_emb; print(infinity_emb.__version__)"],
        env=_env(), capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return done.stdout.strip()


def command(model_dir: Path, port: int, device: str, batch_size: int) -> list[str]:
    """The ``infinity_emb v2`` command line (options as ``infinity_emb v2 --help`` names them)."""
    return [
        _python(), "-m", "infinity_emb.cli", "v2",
        "--model-id", str(model_dir), "--served-model-name", SERVED_NAME,
        "--engine", "torch", "--device", device, "--dtype", "float16" if device == "cuda" else
        "float32", "--batch-size", str(batch_size), "--host", "127.0.0.1", "--port", str(port),
        "--log-level", "warning", "--no-bettertransformer",
    ]  # fmt: skip


@contextmanager
def infinity(
    model_dir: Path, port: int, log: Path, device: str = "cuda", batch_size: int = 32
) -> Iterator[subprocess.Popen]:
    """infinity-emb serving ``model_dir`` on ``127.0.0.1:port`` until the block ends.

    Raises:
        RuntimeError: it is not installed (:func:`installed` says why), it exited, or its
            ``/health`` did not answer within ``START_TIMEOUT_S`` (the log's tail included).
    """
    why = installed()
    if why:
        raise RuntimeError(why)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        process = subprocess.Popen(
            command(model_dir, port, device, batch_size), env=_env(), stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            _wait_healthy(process, port, log)
            yield process
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_healthy(process: subprocess.Popen, port: int, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"infinity-emb exited ({process.returncode}): {_tail(log)}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"infinity-emb not healthy after {START_TIMEOUT_S:.0f} s: {_tail(log)}")


def _tail(log: Path, lines: int = 15) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def body(text: str) -> dict:
    """The request for one text (OpenAI's embeddings API, as infinity-emb serves it)."""
    return {"model": SERVED_NAME, "input": [text]}


def embed(port: int, texts: Sequence[str], chunk: int = 64) -> np.ndarray:
    """Embeddings of ``texts`` from the server, FP32 ``[n, 384]``, in order.

    Raises:
        urllib.error.URLError: the server did not answer.
        ValueError: an answer lacks an embedding.
    """
    rows: list[list[float]] = []
    for start in range(0, len(texts), chunk):
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}{PATH}",
            data=json.dumps(
                {"model": SERVED_NAME, "input": list(texts[start : start + chunk])}
            ).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as answer:
            data = sorted(json.load(answer)["data"], key=lambda d: d["index"])
        if any("embedding" not in d for d in data):
            raise ValueError("an answer of infinity-emb has no embedding")
        rows += [d["embedding"] for d in data]
    return np.asarray(rows, dtype=np.float32)
