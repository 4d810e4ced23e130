"""The core model's inputs for a description's samples: what the build's parity check, the
INT8 calibration and a plan's optimization profile run the core on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from builders.pipeline.graph import ModelSourceError
from builders.pipeline.in_process import InProcess, Replay
from tritonrepo.description import Pipeline, import_ref


def samples_of(pipeline: Pipeline) -> Any:
    """The description's sample request tensors (a stateful pipeline: a list of sessions, each
    ``{input: [events, ...]}``).

    Raises:
        ModelSourceError: the description has no ``[samples]``.
    """
    if not pipeline.samples:
        raise ModelSourceError("samples: a pipeline with a built core needs [samples]")
    return import_ref(pipeline.samples)()


def core_feeds(pipeline: Pipeline, model: Path | bytes) -> dict[str, np.ndarray]:
    """The core model's inputs for the samples: ``preprocess(samples())`` restricted to the
    graph's inputs (a batch-only graph input is flattened to ``[n]``); ``model`` is the
    ``.onnx`` file or the serialized graph."""
    if pipeline.stateful:  # every session's events replayed from START, state included
        return Replay(pipeline, model).core_feeds(samples_of(pipeline))
    runner = InProcess(pipeline, model)
    return runner.core_feeds(runner.pre(dict(samples_of(pipeline))))
