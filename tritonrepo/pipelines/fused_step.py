"""A described pipeline in one Python-backend model: ``preprocess`` → the core model (ONNX
Runtime) → ``postprocess`` in one ``execute`` call, for the ``cpu`` config set of a stateless,
one-core pipeline whose steps are functions.

Why: on CPU every Python-backend step of an ensemble costs a round trip between the server and
a stub process (shared memory, a message queue and a wake-up) per dynamic batch, and the
ensemble scheduler adds its own per-request work; for a small model those hops cost more than
the model (the per-step table of ``make bench-pipelines``). Here the request crosses to one
stub once and the three stages run back to back on the same arrays, as they do in one process
(``tests.pipeline_suite.in_process`` and the FastAPI service a user would write), with the
dynamic batcher in front. The GPU sets keep the ensemble, where the core runs on the GPU.

The generator writes the pipeline's ``configs/cpu.pbtxt`` with ``backend: "python"`` and this
class in ``<pipeline>/<version>/model.py``; ``config.pbtxt`` stays the ensemble. Config
parameters (:attr:`FusedStep.PARAMETERS`): ``preprocess`` and ``postprocess`` (``module:function``),
``code_root`` (as :class:`~tritonrepo.pipelines.function_step.FunctionStep`), ``core_model`` and
``core_file`` (the ONNX file is ``<repository>/<core_model>/<this model's version>/<core_file>``,
the core model's own version folder, so a new core version is served by the same version of
this model), ``preprocess_outputs`` (JSON list of config outputs ``{name, data_type, dims}``:
the core's inputs and the extra tensors preprocess hands to postprocess, checked as a step's
outputs are) and the core's ONNX Runtime parameters
(:data:`~tritonrepo.runners.onnx_runner.RUNNER_PARAMETERS`).

Per request, as in the ensemble: a ``ValueError`` from a function is that request's
InvalidRequest; anything else (a function's bug, an output that does not fit, a failed core run)
is that request's internal error; the other requests of the batch are served.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from tritonrepo.pipelines.function_calls import (
    OutputSpec,
    call_batch,
    output_specs,
)
from tritonrepo.runners.onnx_runner import RUNNER_PARAMETERS, OnnxRunner, runner_from_settings
from tritonrepo.step.function_refs import load_function
from tritonrepo.step.parameters import REQUIRED, Parameter
from tritonrepo.step.python_step import Outputs, PythonStep

Tensors = dict[str, np.ndarray]


def batch_only_inputs(session: object) -> set[str]:
    """The inputs of an ONNX Runtime session with the batch dim only (``[n]``): the steps
    around the graph see them as ``[n, 1]`` (the configs declare ``dims: [ 1 ]`` with
    ``reshape: { shape: [ ] }``), here and in ``builders.pipeline.in_process``."""
    return {i.name for i in session.get_inputs() if len(i.shape) == 1}  # type: ignore[attr-defined]


def for_graph(name: str, value: np.ndarray, batch_only: set[str]) -> np.ndarray:
    """A step's ``[n, 1]`` tensor as the graph's ``[n]`` when ``name`` is batch-only."""
    return value.reshape(-1) if name in batch_only else value


def for_steps(value: np.ndarray) -> np.ndarray:
    """A graph output with the batch dim only (``[n]``) as the steps' ``[n, 1]``."""
    return value.reshape(-1, 1) if value.ndim == 1 else value


def fused_run(
    items: list[Tensors],
    preprocess: tuple[Callable, str, dict[str, OutputSpec]],
    runner: OnnxRunner,
    postprocess: tuple[Callable, str, dict[str, OutputSpec]],
) -> list[Tensors | Exception]:
    """The three stages on a dynamic batch; one result or error per item (nothing raised).

    Args:
        items: per request, ``{pipeline input: array [b_i, ...]}``.
        preprocess: the function, its reference (for messages) and its declared outputs (the
            core's inputs, then the extra tensors for postprocess).
        runner: the core model.
        postprocess: the function, its reference and the pipeline's outputs.

    Returns:
        Per item, ``{pipeline output: array [b_i, ...]}`` or that request's error
        (:func:`~tritonrepo.pipelines.function_calls.call_batch` for the functions' errors;
        :meth:`OnnxRunner.run_batch` for the core's).
    """
    pre_fn, pre_ref, pre_specs = preprocess
    post_fn, post_ref, post_specs = postprocess
    results: list[Tensors | Exception] = [
        _labelled(r, "preprocess") if isinstance(r, Exception) else r
        for r in call_batch(pre_fn, items, pre_specs, ref=pre_ref)
    ]
    good = [i for i, r in enumerate(results) if not isinstance(r, Exception)]
    # A graph tensor with the batch dim only is [n] for the graph and [n, 1] for the steps, as
    # in the ensemble (its configs reshape it) and in builders.pipeline.in_process.
    flat = batch_only_inputs(runner.session)
    feeds = [
        {n: for_graph(n, results[i][n], flat) for n in runner.input_names}  # type: ignore[index]
        for i in good
    ]
    post_items, post_at = [], []
    for i, core_out in zip(good, runner.run_batch(feeds) if feeds else [], strict=True):
        if isinstance(core_out, Exception):
            results[i] = RuntimeError(f"core model: {core_out}")
            continue
        extras = {k: v for k, v in results[i].items() if k not in runner.input_names}  # type: ignore[union-attr]
        outs = {k: for_steps(v) for k, v in core_out.items()}
        post_items.append({**outs, **extras})
        post_at.append(i)
    if post_items:
        for i, out in zip(post_at, call_batch(post_fn, post_items, post_specs, ref=post_ref),
                          strict=True):  # fmt: skip
            results[i] = _labelled(out, "postprocess") if isinstance(out, Exception) else out
    return results


def _labelled(exc: Exception, stage: str) -> Exception:
    """``exc`` of the same type (so it maps to the same error kind) with its message prefixed
    by the stage that raised it, e.g. ``preprocess: FEATURES row 0 ...``."""
    try:
        return type(exc)(f"{stage}: {exc}")
    except Exception:
        return RuntimeError(f"{stage}: {exc}")


def share_of_cores(model_config: dict) -> int:
    """ONNX Runtime intra-op threads for one instance when the config asks for ONNX Runtime's
    default (``intra_op_threads`` 0, one thread per core): the cores this process may use
    divided among the model's instances (at least 1), so the instances together use each core
    once. On 2 cores with two instances, ``nudenet_detector`` served more images per second
    with one thread per instance than with two (``make bench-pipelines``)."""
    instances = sum(int(g.get("count", 1)) for g in model_config.get("instance_group", [])) or 1
    return max(1, len(os.sched_getaffinity(0)) // instances)


class FusedStep(PythonStep):
    """Inputs: the pipeline's inputs, each ``[b, *dims]`` → outputs: the pipeline's outputs,
    ``[b, *dims]`` of the config's dtypes (module docstring).

    Raises:
        FunctionImportError: from ``initialize``: a function cannot be loaded.
        FileNotFoundError: from ``initialize``: the core's ONNX file is not built.
        ParameterError: from ``initialize``: a parameter does not fit :attr:`PARAMETERS`.
    """

    PARAMETERS = (
        Parameter("preprocess", "str", REQUIRED, "module:function", "the preprocess function"),
        Parameter("postprocess", "str", REQUIRED, "module:function", "the postprocess function"),
        Parameter(
            "code_root",
            "str",
            "../..",
            "directory",
            "put on sys.path before importing the functions; relative to the model's folder",
        ),
        Parameter("core_model", "str", REQUIRED, "model", "the core model's folder"),
        Parameter("core_file", "str", "model.onnx", "file", "the core's ONNX file"),
        Parameter(
            "preprocess_outputs",
            "str",
            REQUIRED,
            "JSON",
            "preprocess's outputs as config outputs: [{name, data_type, dims}, ...]",
        ),
        *RUNNER_PARAMETERS,
    )

    def setup(self) -> None:
        settings = self.settings
        model_dir = self.version_dir.parent
        root = model_dir / Path(settings["code_root"])
        batch = int(self.model_config.get("max_batch_size", 1))
        pre_ref, post_ref = settings["preprocess"], settings["postprocess"]
        pre_specs = output_specs(json.loads(settings["preprocess_outputs"]), batch)
        self.preprocess = (load_function(pre_ref, root), pre_ref, pre_specs)
        self.postprocess = (
            load_function(post_ref, root),
            post_ref,
            output_specs(self.model_config["output"], batch),
        )
        core = model_dir.parent / settings["core_model"] / self.version_dir.name
        path = core / settings["core_file"]
        if not path.is_file():
            raise FileNotFoundError(f"core model {path} is missing; build it with `make artifacts`")
        threads = settings["intra_op_threads"] or share_of_cores(self.model_config)
        self.runner = runner_from_settings(path, {**settings, "intra_op_threads": threads})

    def run(self, items: list[Tensors]) -> list[Outputs | Exception]:
        return fused_run(items, self.preprocess, self.runner, self.postprocess)
