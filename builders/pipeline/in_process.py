"""A described pipeline in one process: its preprocess function, one ONNX Runtime session (CPU)
on the core model, its postprocess function, handing tensors over as the served ensemble does.

A graph tensor with the batch dim only is ``[n]`` for the model and ``[n, 1]`` for the steps
(the configs declare it ``dims: [ 1 ]`` with ``reshape: { shape: [ ] }``). The generator's
checks, the builder's INT8 agreement, the generated tests and ``make bench-pipelines`` all run
the pipeline through :class:`InProcess`; a stateful one through :class:`Replay`, event by
event as the session model serves it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tritonrepo.description import DTYPES, Pipeline, import_ref
from tritonrepo.pipelines.fused_step import batch_only_inputs, for_graph, for_steps
from tritonrepo.pipelines.session_calls import no_step

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


@dataclass
class EventRun:
    """One event of a session run as served: the step's ``outputs`` (core inputs and extras,
    ``[1, ...]``), the core's ``feeds`` (state inputs included), its outputs ``core`` (by name)
    and the ``response`` (postprocess's outputs)."""

    outputs: Tensors
    feeds: Tensors
    core: Tensors
    response: Tensors


class Replay:
    """A stateful pipeline (``[sequence]``) in one process, event by event in the true order:
    for each event its ``step`` (on the step's state so far; None at START), the core model on
    the step's outputs and the session's state inputs (ONNX Runtime, CPU), the state the core
    returns taken for the next event (``[[sequence.state]]``: zeros at START), and postprocess
    on that event's core outputs. The same arguments as :class:`InProcess`."""

    def __init__(self, pipeline: Pipeline, model: Path | bytes, options: Any = None) -> None:
        assert pipeline.session is not None, "Replay runs a stateful pipeline"
        self.runner = InProcess(pipeline, model, options)
        step = pipeline.session.step
        self.step = import_ref(step) if step else no_step
        self.states = pipeline.session.states

    def initial_states(self) -> Tensors:
        """The core's state inputs at START: zeros ``[1, *dims]`` of each state."""
        return {s.input: np.zeros((1, *s.dims), DTYPES[s.dtype]) for s in self.states}

    def event(self, state: Any, core_state: Mapping[str, np.ndarray],
              inputs: Mapping[str, np.ndarray]) -> tuple[Any, Tensors, EventRun]:  # fmt: skip
        """One event (``inputs``, ``[1, ...]``) after the step's ``state`` and the core's
        ``core_state``: the step's next state, the core's next state and the run.

        Raises:
            whatever the step, the core or postprocess raise; ValueError for a step that does
            not return the pair (state, outputs).
        """
        result = self.step(state, dict(inputs))
        if not isinstance(result, tuple) or len(result) != 2:
            raise ValueError(f"the step returned a {type(result).__name__}; return the pair "
                             "(state, outputs)")  # fmt: skip
        state, outputs = result
        feeds = self.runner.core_feeds({**outputs, **core_state})
        results = self.runner.run_core(feeds)
        core = dict(zip(self.runner.names, results, strict=True))
        response = self.runner.post(self.runner.post_inputs(outputs, results))
        next_core = {s.input: np.asarray(core[s.output]) for s in self.states}
        return state, next_core, EventRun(dict(outputs), feeds, core, response)

    def runs(self, events: Mapping[str, np.ndarray]) -> list[EventRun]:
        """Every event of one session (batch-first, one row per event, in order) from START."""
        rows = len(next(iter(events.values())))
        state, core_state, runs = None, self.initial_states(), []
        for i in range(rows):
            event = {k: np.asarray(v)[i : i + 1] for k, v in events.items()}
            state, core_state, run = self.event(state, core_state, event)
            runs.append(run)
        return runs

    def core_feeds(self, sessions: Sequence[Mapping[str, np.ndarray]]) -> Tensors:
        """The core's inputs of every event of ``sessions``, state included, joined along the
        batch dim (the build's parity check and the TensorRT plan's profile)."""
        feeds = [run.feeds for events in sessions for run in self.runs(events)]
        return {k: np.concatenate([f[k] for f in feeds]) for k in feeds[0]}

    def __call__(self, events: Mapping[str, np.ndarray]) -> Tensors:
        """The responses to every event of one session, one row per event."""
        responses = [run.response for run in self.runs(events)]
        return {k: np.concatenate([np.asarray(r[k]) for r in responses]) for k in responses[0]}
