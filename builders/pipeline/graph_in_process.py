"""A graph description (``[models.<key>]`` and ``[[step]]``) in one process: every step in
order, the Python functions called as the served steps call them, each core model on ONNX
Runtime (CPU), the calls of a step to a declared model too.

Tensors are handed over as the ensemble does: by pipeline tensor name, a core step's graph
tensors renamed by its ``inputs``/``outputs`` tables; a graph tensor with the batch dim only is
``[n]`` for the model and ``[n, 1]`` everywhere else (its configs declare ``dims: [ 1 ]`` with
``reshape: { shape: [ ] }``). The generator's checks, the build's parity check and the generated
tests run a graph pipeline through :class:`GraphInProcess`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tritonrepo.description import GraphPipeline, GraphStep, import_ref
from tritonrepo.pipelines.step_calls import Models

Tensors = dict[str, np.ndarray]


class CoreRunner:
    """One core model on ONNX Runtime (CPU), called with its config's view of the tensors;
    ``model`` is an ``.onnx`` path or the serialized graph, ``options`` its SessionOptions."""

    def __init__(self, model: Path | bytes, options: Any = None) -> None:
        import onnxruntime as ort

        source = model if isinstance(model, bytes) else str(model)
        self.session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
        self.names = [o.name for o in self.session.get_outputs()]
        self.flat = {i.name for i in self.session.get_inputs() if len(i.shape) == 1}
        self.feeds: list[Tensors] = []  # every call's graph feeds (the build's parity check)
        self.last: list[np.ndarray] = []  # the last call's raw graph outputs, in names order

    def __call__(self, inputs: Mapping[str, np.ndarray]) -> Tensors:
        """``{graph output: array}`` for ``{graph input: array}`` (batch-only tensors
        ``[n, 1]``).

        Raises:
            KeyError: a graph input is missing; whatever ONNX Runtime raises.
        """
        feeds = {}
        for tensor in self.session.get_inputs():
            value = np.asarray(inputs[tensor.name])
            feeds[tensor.name] = value.reshape(-1) if tensor.name in self.flat else value
        self.feeds.append(feeds)
        results = self.last = self.session.run(self.names, feeds)
        return {
            n: (r.reshape(-1, 1) if r.ndim == 1 else r)
            for n, r in zip(self.names, results, strict=True)
        }


class GraphInProcess:
    """``pipeline`` with its core models ``models`` (``{key: .onnx path or serialized
    graph}``); :meth:`run` keeps every tensor, ``__call__`` returns the response."""

    def __init__(
        self, pipeline: GraphPipeline, models: Mapping[str, Path | bytes], options: Any = None
    ) -> None:
        self.pipeline = pipeline
        self.cores = {key: CoreRunner(models[key], options) for key in pipeline.cores}
        by_model = {core.model: key for key, core in pipeline.cores.items()}
        self._infer = lambda model, feeds: self.cores[by_model[model]](feeds)
        self.functions = {
            s.index: import_ref(s.python.ref)
            for s in pipeline.python_steps
            if s.python is not None and s.python.function
        }

    def models_of(self, step: GraphStep) -> Models:
        """The ``models`` argument of a Python step with ``calls``."""
        assert step.python is not None
        return Models({k: self.pipeline.cores[k].model for k in step.python.calls}, self._infer)

    def run_step(self, step: GraphStep, tensors: Mapping[str, np.ndarray]) -> Tensors:
        """One step on the pipeline's ``tensors``: its outputs, by pipeline tensor name."""
        if step.python is not None:
            inputs = {name: tensors[name] for name in step.inputs}
            function = self.functions[step.index]
            if step.python.calls:
                return dict(function(inputs, self.models_of(step)))
            return dict(function(inputs))
        assert step.core is not None and step.input_map is not None
        runner = self.cores[step.core]
        graph_inputs = [t.name for t in runner.session.get_inputs()]
        results = runner({g: tensors[step.input_map.get(g, g)] for g in graph_inputs})
        out_map = step.output_map or {}
        return {out_map.get(g, g): value for g, value in results.items()}

    def run(self, inputs: Mapping[str, np.ndarray]) -> Tensors:
        """Every tensor of the pipeline (request, and each step's outputs) for ``inputs``."""
        tensors = dict(inputs)
        for step in self.pipeline.steps:
            tensors.update(self.run_step(step, tensors))
        return tensors

    def __call__(self, inputs: Mapping[str, np.ndarray]) -> Tensors:
        """Batch-first request tensors -> the pipeline's response tensors."""
        tensors = self.run(inputs)
        return {t.name: tensors[t.name] for t in self.pipeline.outputs}
