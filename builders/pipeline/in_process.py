"""A described pipeline in one process: its preprocess function, one ONNX Runtime session (CPU)
on the core model, its postprocess function, handing tensors over as the served ensemble does.

A graph tensor with the batch dim only is ``[n]`` for the model and ``[n, 1]`` for the steps
(the configs declare it ``dims: [ 1 ]`` with ``reshape: { shape: [ ] }``). The generator's
checks, the builder's INT8 agreement, the generated tests and ``make bench-pipelines`` all run
the pipeline through :class:`InProcess`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tritonrepo.description import Pipeline, import_ref
from tritonrepo.pipelines.fused_step import batch_only_inputs, for_graph, for_steps

Tensors = dict[str, np.ndarray]


class InProcess:
    """``pipeline`` around ``model`` (an ``.onnx`` path or the serialized graph).

    Args:
        pipeline: the description (:func:`tritonrepo.description.load`).
        model: the core model.
        options: ``onnxruntime.SessionOptions`` (default: ONNX Runtime's).
    """

    def __init__(self, pipeline: Pipeline, model: Path | bytes, options: Any = None) -> None:
        import onnxruntime as ort

        self.pipeline = pipeline
        source = model if isinstance(model, bytes) else str(model)
        self.session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
        self.names = [o.name for o in self.session.get_outputs()]
        self.flat = batch_only_inputs(self.session)
        pre = pipeline.preprocess.function  # None for a stateful pipeline (its session step)
        self.pre = import_ref(pre) if pre else None
        self.post = import_ref(pipeline.postprocess.function)

    def core_feeds(self, pre_out: Mapping[str, Any]) -> Tensors:
        """The graph's inputs out of preprocess's result (a batch-only input flattened)."""
        feeds = {}
        for tensor in self.session.get_inputs():
            value = np.asarray(pre_out[tensor.name])
            feeds[tensor.name] = for_graph(tensor.name, value, self.flat)
        return feeds

    def run_core(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """The graph's outputs, in :attr:`names` order."""
        return self.session.run(self.names, dict(feeds))

    def post_inputs(self, pre_out: Mapping[str, Any], results: Sequence[np.ndarray]) -> Tensors:
        """Postprocess's inputs: the graph's outputs (a batch-only one as ``[n, 1]``) and the
        extra preprocess outputs."""
        post_in = {n: for_steps(r) for n, r in zip(self.names, results, strict=True)}
        post_in.update({t.name: pre_out[t.name] for t in self.pipeline.preprocess.outputs})
        return post_in

    def __call__(self, inputs: Mapping[str, np.ndarray]) -> Tensors:
        """Batch-first request tensors → the pipeline's response tensors."""
        pre_out = self.pre(dict(inputs))
        return self.post(self.post_inputs(pre_out, self.run_core(self.core_feeds(pre_out))))


class Replay:
    """A stateful pipeline (``[sequence]``) in one process: its ``step`` replayed from START
    over a session's events, the core model on every event's step outputs (ONNX Runtime, CPU),
    its postprocess function; the same arguments as :class:`InProcess`."""

    def __init__(self, pipeline: Pipeline, model: Path | bytes, options: Any = None) -> None:
        assert pipeline.session is not None, "Replay runs a stateful pipeline"
        self.runner = InProcess(pipeline, model, options)
        self.step = import_ref(pipeline.session.step)

    def step_outputs(self, events: Mapping[str, np.ndarray]) -> Tensors:
        """The step's outputs for the events of one session (batch-first, one row per event,
        in order), joined along axis 0: ``state`` starts as None and is carried over."""
        rows = len(next(iter(events.values())))
        state, outputs = None, []
        for i in range(rows):
            state, out = self.step(state, {k: np.asarray(v)[i : i + 1] for k, v in events.items()})
            outputs.append(out)
        return {k: np.concatenate([np.asarray(o[k]) for o in outputs]) for k in outputs[0]}

    def __call__(self, events: Mapping[str, np.ndarray]) -> Tensors:
        """The responses to every event of one session, one row per event."""
        step_out = self.step_outputs(events)
        results = self.runner.run_core(self.runner.core_feeds(step_out))
        return self.runner.post(self.runner.post_inputs(step_out, results))
