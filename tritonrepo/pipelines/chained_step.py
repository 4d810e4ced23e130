"""A described pipeline in one Python-backend model on the GPU: preprocess → core (a
``torch.export`` program) → postprocess in one ``execute``, for the ``torch_gpu`` config set of a
pipeline whose description asks for it (``one_step_gpu = true``).

Why: in the ensemble each stage is its own model, so each request crosses three stub processes
and the ensemble scheduler; on the H200 at one text per request (c = 1) the three hops of
``text_embedding`` cost 0.7-1.3 ms each (tokenize 0.1 + 0.9, encoder 1.1 + 1.3, normalise
0.1 + 0.7 ms of queue + compute, ``make bench-gpu``), more than the encoder's CUDA graph. Here a
dynamic batch crosses to one stub once and the three stages run back to back on the same
tensors, on the instance's GPU, as they do in one process.

The stages are the pipeline's own models, not copies of their logic: ``stages.json`` in the
version folder (written by the generator, :mod:`builders.pipeline.serving_forms.chained_gpu`)
lists, in order, each stage's model name, its class (``module:Class``, a
:class:`~tritonrepo.step.python_step.PythonStep`: the step class, the function step, or the core's
:class:`~tritonrepo.runners.torch_step.TorchProgramStep`), the version folder it loads from, the
kind of instance it wants (``GPU`` stages run on this instance's GPU) and its model config for the
set, as Triton hands a config to a Python model. Each stage is set up as Triton would set up
that model (:meth:`PythonStep.initialize_stage`: its parameters, its artifacts, its device), so
a stage behaves here as it does as its own model. The core's version folder is this model's
version (a new core version is served by the same version of this model, as with the CPU
one-step model).

Tensors pass by name, as the ensemble's ``input_map``/``output_map`` do: each stage gets the
tensors its config names from the request's inputs and the earlier stages' outputs, as numpy
arrays or ``torch`` tensors as the stage reads them (``tensor_library``); numpy outputs are cast
to the stage's declared output types, as its own responses would be.

Per request, as in the ensemble: an error a stage gives one request (its ``prepare`` raising, or
an exception among its ``run`` results) is that request's error, prefixed with the stage's model
name and of the same kind (an InvalidRequest stays a client error); the other requests of the
batch go on. Priorities, queue bounds and request timeouts are the ensemble core's, not this
model's (it has Triton's plain queue, :data:`tritonrepo.server.queue_policy.PLAIN`).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tritonrepo.pipelines.function_calls import OutputCheckError, check_outputs, output_specs
from tritonrepo.step.errors import InvalidRequest
from tritonrepo.step.parameters import REQUIRED, Parameter
from tritonrepo.step.python_step import Outputs, PythonStep

STAGES_FILE = "stages.json"  # in each version folder of the one-step model (module docstring)
# The config parameter naming the stages' models (tritonrepo_format.roles
# STAGES_PARAMETER: the preflight checks their files, make gpu-pack carries them).
STAGES_PARAMETER = "tritonrepo_stages"
STAGE_KEYS = ("model", "class", "version", "kind", "config")  # each stage object's fields


@dataclass
class Stage:
    """One stage: its model's name, the set-up model and the config inputs it reads."""

    model: str
    step: PythonStep
    inputs: list[dict[str, Any]]


def step_class(reference: str) -> type[PythonStep]:
    """The class ``module:Class`` names.

    Raises:
        ImportError: the module does not import or has no such class.
        TypeError: it is not a PythonStep.
    """
    module, _, name = reference.partition(":")
    cls = getattr(importlib.import_module(module), name, None)
    if cls is None:
        raise ImportError(f"{reference}: module {module} has no {name}")
    if not (isinstance(cls, type) and issubclass(cls, PythonStep)):
        raise TypeError(f"{reference} is not a PythonStep class")
    return cls


def host(value: Any) -> Any:
    """A ``torch`` tensor as a numpy array on the host (other values as they are)."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):
        return value.detach().cpu().numpy()
    return value


def for_stage(value: Any, library: str) -> Any:
    """``value`` (numpy array or ``torch`` tensor) as the stage reads it: numpy (a GPU tensor is
    copied to the host) or ``torch`` (a numpy array is shared, not copied; BYTES stay numpy)."""
    if library == "torch":
        if isinstance(value, np.ndarray) and value.dtype != object:
            import torch

            return torch.from_numpy(np.ascontiguousarray(value))
        return value
    if isinstance(value, np.ndarray):
        return value
    return value.detach().cpu().numpy()


def labelled(exc: BaseException, model: str) -> Exception:
    """A request's error from stage ``model``, with the model before its message: an
    InvalidRequest keeps its type (a client error, as the stage's own response would be);
    anything else (a stage's bug, a ``SystemExit``) becomes an internal RuntimeError naming the
    exception's type."""
    if isinstance(exc, InvalidRequest):
        try:
            return type(exc)(f"{model}: {exc}")
        except Exception:
            return InvalidRequest(f"{model}: {exc}")
    return RuntimeError(f"{model}: {type(exc).__name__}: {exc}")


def read_stages(path: Path) -> list[dict[str, Any]]:
    """The stage list of ``stages.json``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: not JSON, not a list of stage objects, or a stage without one of
            :data:`STAGE_KEYS`; the message names the file and says how to regenerate it.
    """
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; generate it with `tritonrepo-new`")
    regenerate = "generate the model again with `tritonrepo-new`"
    try:
        stages = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not JSON ({exc}); {regenerate}") from None
    if not isinstance(stages, list) or not all(isinstance(s, dict) for s in stages):
        raise ValueError(f"{path} must be a JSON list of stage objects; {regenerate}")
    for i, stage in enumerate(stages):
        missing = [key for key in STAGE_KEYS if key not in stage]
        if missing:
            raise ValueError(f"{path}: stage {i} has no {', '.join(missing)}; {regenerate}")
    return stages


class ChainedStep(PythonStep):
    """Inputs: the pipeline's inputs, each ``[b, *dims]`` → outputs: the pipeline's outputs,
    ``[b, *dims]`` numpy arrays of the config's dtypes on the host, checked as a function step's
    are (:func:`~tritonrepo.pipelines.function_calls.check_outputs`: a missing output, a wrong
    shape or a type that does not cast is that request's internal error, naming the last stage).

    Raises (from ``initialize``): FileNotFoundError (no ``stages.json``), ValueError (it is not a
    list of stage objects, or does not match ``core_model``/``tritonrepo_stages``), RuntimeError
    (a stage's class does not import or its own set-up failed: e.g. an artifact not built or a
    bad parameter, with the stage's model and the original error named).
    """

    PARAMETERS = (
        Parameter(
            "core_model",
            "str",
            REQUIRED,
            "model",
            "the core model, one of the stages (its version folder is this model's version)",
        ),
    )

    def setup(self) -> None:
        path = self.version_dir / STAGES_FILE
        repository = self.version_dir.parent.parent
        device_id = self.device.partition(":")[2] or "0"
        self.stages: list[Stage] = []
        for spec in read_stages(path):
            model = spec["model"]
            gpu = spec["kind"] == "GPU" and self.device != "cpu"
            version = self.version_dir.name if spec["version"] == "this" else spec["version"]
            args = {
                "model_config": json.dumps(spec["config"]),
                "model_name": model,
                "model_repository": str(repository / model),
                "model_version": str(version),
                "model_instance_kind": "GPU" if gpu else "CPU",
                "model_instance_device_id": device_id,
                "model_instance_name": f"{self.model_name}/{model}",
            }
            try:
                step = step_class(spec["class"])()
                step.initialize_stage(args)
                inputs = list(spec["config"]["input"])
            except Exception as exc:  # the stage named, whatever its exception's signature
                raise RuntimeError(
                    f"{path.name}: stage {model}: {type(exc).__name__}: {exc}"
                ) from exc
            self.stages.append(Stage(model, step, inputs))
        names = [out["name"] for out in self.model_config["output"]]
        self.output_specs = output_specs(self.model_config["output"], self.max_batch_size)
        self.output_names = names
        named = [m for m in self.parameters.get(STAGES_PARAMETER, "").split(",") if m]
        if named and named != [s.model for s in self.stages]:
            raise ValueError(
                f"{STAGES_PARAMETER} {named} is not the stages of {path}; generate the model "
                "again with `tritonrepo-new`"
            )
        if self.settings["core_model"] not in [s.model for s in self.stages]:
            raise ValueError(
                f"core_model {self.settings['core_model']} is not a stage of {path}; "
                "generate the model again with `tritonrepo-new`"
            )

    def finalize(self) -> None:
        for stage in getattr(self, "stages", []):
            stage.step.finalize()
        super().finalize()

    @property
    def max_batch_size(self) -> int:
        return int(self.model_config.get("max_batch_size", 0))

    def run(self, items: list[dict[str, Any]]) -> list[Outputs | Exception]:
        results: list[dict[str, Any] | Exception] = list(items)
        for stage in self.stages:
            self._run_stage(stage, results)
        last = self.stages[-1].model if self.stages else self.model_name
        return [
            r if isinstance(r, Exception) else self._final(r, item, last)
            for r, item in zip(results, items, strict=True)
        ]

    def _final(
        self, tensors: dict[str, Any], request: dict[str, Any], last: str
    ) -> Outputs | Exception:
        """The request's outputs as numpy arrays of the declared dtypes and shapes (as a
        function step's are checked), or the error naming the last stage."""
        try:
            found = {n: host(tensors[n]) for n in self.output_names if n in tensors}
            first = next(iter(request.values()), None)
            rows = first.shape[0] if self.max_batch_size and first is not None else None
            return check_outputs(found, rows, self.output_specs, last)
        except Exception as exc:  # OutputCheckError, or a value that cannot be read
            return labelled(exc, self.model_name) if not isinstance(exc, OutputCheckError) else exc

    def _run_stage(self, stage: Stage, results: list[dict[str, Any] | Exception]) -> None:
        """Run ``stage`` on every request still without an error; its outputs are added to the
        request's tensors, its errors (per request; the whole batch's when ``run`` itself fails)
        replace them."""
        step, library = stage.step, stage.step.tensor_library
        positions, prepared = [], []
        for i, tensors in enumerate(results):
            if isinstance(tensors, Exception):
                continue
            try:
                inputs = {}
                for spec in stage.inputs:
                    name = spec["name"]
                    if name in tensors:
                        inputs[name] = for_stage(tensors[name], library)
                    elif not spec.get("optional", False):
                        raise InvalidRequest(f"input '{name}' is missing")
                prepared.append(step.prepare(inputs))
                positions.append(i)
            except (Exception, SystemExit) as exc:  # an InvalidRequest, or a stage's bug
                results[i] = labelled(exc, stage.model)
        if not prepared:
            return
        try:
            outputs = list(step.run(prepared))
            if len(outputs) != len(prepared):
                raise RuntimeError(f"run returned {len(outputs)} results for {len(prepared)}")
        except (Exception, SystemExit) as exc:
            outputs = [exc] * len(prepared)
        for i, out in zip(positions, outputs, strict=True):
            try:
                if isinstance(out, BaseException):
                    raise out
                if not isinstance(out, Mapping):
                    raise TypeError(f"a result is a {type(out).__name__}, not a dict of tensors")
                results[i] = {**results[i], **self._typed(step, out)}  # type: ignore[dict-item]
            except (Exception, SystemExit) as exc:
                results[i] = labelled(exc, stage.model)

    @staticmethod
    def _typed(step: PythonStep, outputs: Mapping[str, Any]) -> dict[str, Any]:
        """A stage's outputs, numpy ones cast to its declared output types.

        Raises:
            ValueError, TypeError: a value does not convert to its declared type.
        """
        dtypes = step.output_dtypes
        return {
            name: np.asarray(value, dtype=dtypes[name])
            if isinstance(value, np.ndarray) and name in dtypes
            else value
            for name, value in outputs.items()
        }
