"""Base class for the Python-backend models: per-request errors, joint batch processing.

Triton's dynamic batcher hands ``execute`` a list of requests. :class:`PythonStep` reads every
request's inputs, lets the subclass validate each one (:meth:`PythonStep.prepare`), runs all valid
ones together (:meth:`PythonStep.run`) and answers each request on its own: a bad request gets an
``InferenceResponse(error=...)`` and the others in the batch are served. Nothing is raised out of
``execute`` (that would fail every request of the batch). Every error answer is also written
to the server log with the model and the request id, rate-limited
(:mod:`tritonrepo.step.error_log`).

``triton_python_backend_utils`` only exists inside the Python backend stub, so it is imported in
:meth:`PythonStep.initialize`; the rest of this package is importable (and tested) without it.

Tensors are numpy arrays by default. A step that sets ``tensor_library = "torch"`` (the GPU
steps) gets ``torch`` tensors through DLPack instead, on whatever device Triton placed them
(with ``FORCE_CPU_ONLY_INPUT_TENSORS`` "no", a GPU tensor from the previous ensemble step stays on
the GPU), and may return ``torch`` tensors, which leave through DLPack without a host copy.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from tritonrepo.step.drift import FeatureMonitor, monitor_for
from tritonrepo.step.error_log import ErrorLog
from tritonrepo.step.errors import InvalidRequest
from tritonrepo.step.metrics import StepErrorCounters, error_kind
from tritonrepo.step.parameters import Parameter, parse
from tritonrepo.step.served_copy import AS_VERSION_PARAMETER, served_version_dir

Outputs = dict[str, np.ndarray]


class PythonStep:
    """A Python-backend model; subclasses implement :meth:`setup`, :meth:`prepare` and :meth:`run`.

    Attributes set by :meth:`initialize`: ``model_config`` (dict), ``model_name``,
    ``version_dir`` (Path of the loaded version folder), ``parameters`` (the config's
    ``parameters`` as ``{key: string_value}``), ``device`` (``"cuda:N"`` for a ``KIND_GPU``
    instance on GPU N, else ``"cpu"``). :attr:`settings` holds the typed values of the
    parameters the subclass declares in ``PARAMETERS`` (:mod:`tritonrepo.step.parameters`).
    """

    tensor_library = "numpy"  # or "torch": inputs and outputs through DLPack (module docstring)
    # The config parameters this step reads, parsed by initialize() before setup().
    PARAMETERS: tuple[Parameter, ...] = ()
    _settings: dict[str, Any] | None = None

    def initialize(self, args: dict[str, str]) -> None:
        """Called once per instance by the Python backend with its ``args`` dict.

        Raises:
            ParameterError: the config's parameters do not fit ``PARAMETERS``; the model's load
                fails with its message (model and key named).
        """
        self._initialize(args, counted=True)

    def initialize_stage(self, args: dict[str, str]) -> None:
        """Set up this model as a stage of another Python model's ``execute``
        (:mod:`tritonrepo.pipelines.chained_step`): as :meth:`initialize` with the ``args`` Triton
        would give it, but without error counters or log of its own (the model that calls its
        :meth:`prepare` and :meth:`run` answers, counts and logs the errors).

        Raises:
            ParameterError: as :meth:`initialize`.
        """
        self._initialize(args, counted=False)

    def _initialize(self, args: dict[str, str], counted: bool) -> None:
        self.model_config: dict[str, Any] = json.loads(args["model_config"])
        self.model_name = args["model_name"]
        self.parameters = {
            key: value.get("string_value", "")
            for key, value in self.model_config.get("parameters", {}).items()
        }
        # Parsed now: a wrong value fails the load before anything is built.
        self._settings = parse(self.PARAMETERS, self.parameters, self.model_name)
        import triton_python_backend_utils as pb_utils

        self.pb_utils = pb_utils
        as_version = self.parameters.get(AS_VERSION_PARAMETER)
        self.version_dir = (
            served_version_dir(as_version)  # a canary's copy (tritonrepo.step.served_copy)
            if as_version
            else Path(args["model_repository"]) / args["model_version"]
        )
        gpu = args.get("model_instance_kind") == "GPU"
        self.device = f"cuda:{args.get('model_instance_device_id', '0')}" if gpu else "cpu"
        if counted:
            self.error_log = ErrorLog(pb_utils.Logger.log_warn)
            self.error_counters = StepErrorCounters(
                pb_utils,
                self.model_name,
                args.get("model_version", ""),
                args.get("model_instance_name", ""),
            )
        self.output_dtypes = {
            out["name"]: pb_utils.triton_string_to_numpy(out["data_type"])
            for out in self.model_config["output"]
        }
        self.setup()
        if counted:
            self.feature_monitor = self._feature_monitor(args)

    def _feature_monitor(self, args: dict[str, str]) -> FeatureMonitor | None:
        """The drift counters of a model that receives a pipeline's requests
        (:mod:`tritonrepo.step.drift`); None without ``tritonrepo_drift``, or, with a warning in
        the server log, when the profile file has not been built.

        Raises:
            ValueError, FunctionImportError: the parameter or its features function is wrong
                (the load fails with the message).
        """
        try:
            return monitor_for(self.pb_utils, self.parameters, self.model_config, args)
        except OSError as exc:
            self.pb_utils.Logger.log_warn(
                f"{self.model_name}: input features are not counted: {exc}; `make artifacts` "
                "writes the pipeline's drift profile"
            )
            return None

    # --- to implement -------------------------------------------------------------------------
    def setup(self) -> None:
        """Load what the model needs (files in ``version_dir``, ``parameters``)."""

    def prepare(self, inputs: dict[str, np.ndarray]) -> Any:
        """Validate one request's inputs and return what :meth:`run` consumes.

        Raises:
            InvalidRequest: the request cannot be served; only that request gets the error.
        """
        return inputs

    def run(self, items: list[Any]) -> list[Outputs | Exception]:
        """Compute outputs for all prepared requests of the batch, one entry per request.

        An entry may be an exception: that request gets it as its error.
        """
        raise NotImplementedError

    # --- the Python backend interface -----------------------------------------------------------
    @property
    def settings(self) -> dict[str, Any]:
        """``{name: typed value}`` of every parameter in ``PARAMETERS``, parsed once from
        ``parameters`` (:func:`tritonrepo.step.parameters.parse`).

        Raises:
            ParameterError: a value does not fit its declaration, a required one is missing, or
                a key is unknown; the message names the model and the key.
        """
        if self._settings is None:
            model = getattr(self, "model_name", type(self).__name__)
            self._settings = parse(self.PARAMETERS, self.parameters, model)
        return self._settings

    def artifact(self, filename: str) -> Path:
        """Path of a built artifact in the version folder.

        Raises:
            FileNotFoundError: it has not been built (the message says how to build it).
        """
        path = self.version_dir / filename
        if not path.is_file():
            raise FileNotFoundError(f"artifact {path} is missing; build it with `make artifacts`")
        return path

    def read_inputs(self, request: Any) -> dict[str, Any]:
        """The request's input tensors as numpy arrays (``torch`` tensors when
        ``tensor_library`` is ``"torch"``), keyed by config input name.

        Raises:
            InvalidRequest: a required input is missing.
        """
        inputs = {}
        for spec in self.model_config["input"]:
            tensor = self.pb_utils.get_input_tensor_by_name(request, spec["name"])
            if tensor is None:
                if spec.get("optional", False):
                    continue
                raise InvalidRequest(f"input '{spec['name']}' is missing")
            if self.tensor_library == "torch":
                import torch

                inputs[spec["name"]] = torch.from_dlpack(tensor.to_dlpack())
            else:
                inputs[spec["name"]] = tensor.as_numpy()
        return inputs

    @staticmethod
    def host_array(tensor: Any) -> np.ndarray:
        """A ``pb_utils.Tensor`` as a numpy array in host memory: a BLS response from a model
        on the GPU (e.g. ``ctr_model`` in the ``torch_gpu`` set) is copied from the device
        through DLPack (``as_numpy`` refuses GPU tensors)."""
        if tensor.is_cpu():
            return tensor.as_numpy()
        import torch

        return torch.from_dlpack(tensor.to_dlpack()).cpu().numpy()

    def error_response(self, message: str, invalid_argument: bool = True) -> Any:
        """An ``InferenceResponse`` carrying ``message`` as its error."""
        pb = self.pb_utils
        code = getattr(pb.TritonError, "INVALID_ARG" if invalid_argument else "INTERNAL", None)
        error = pb.TritonError(message) if code is None else pb.TritonError(message, code)
        return pb.InferenceResponse(error=error)

    def execute(self, requests: list[Any]) -> list[Any]:
        """Answer every request; never raises."""
        responses: list[Any] = [None] * len(requests)
        positions, items, received = [], [], []
        for i, request in enumerate(requests):
            try:
                inputs = self.read_inputs(request)
                items.append(self.prepare(inputs))
                positions.append(i)
                received.append(inputs)
            except InvalidRequest as exc:
                responses[i] = self._error(request, f"{self.model_name}: {exc}", error_kind(exc))
            except Exception as exc:  # a bug must not take the other requests down
                message = f"{self.model_name}: internal error: {exc!r}"
                responses[i] = self._error(request, message, "internal")
        if items:
            try:
                results = self.run(items)
            except Exception as exc:
                results = [exc] * len(items)
            for i, result in zip(positions, results, strict=True):
                responses[i] = self._response(requests[i], result)
            self._observe(received)
        return responses

    def _observe(self, received: list[dict[str, Any]]) -> None:
        """Count the features of the requests that were served (never raises: a failure is
        logged, rate-limited, and the answers stand)."""
        monitor = getattr(self, "feature_monitor", None)
        if monitor is None:
            return
        try:
            monitor.observe(received)
        except Exception as exc:
            log = getattr(self, "error_log", None)
            if log is not None:
                log.error(self.model_name, "", f"input features not counted: {exc!r}")

    def _error(self, request: Any, message: str, kind: str) -> Any:
        """The error answer to ``request``, also written to the server log (rate-limited) and
        counted in ``tritonrepo_step_errors_total`` under ``kind``
        (:data:`tritonrepo.step.metrics.ERROR_KINDS`)."""
        counters = getattr(self, "error_counters", None)
        if counters is not None:
            counters.count(kind)
        log = getattr(self, "error_log", None)
        if log is not None:
            try:
                request_id = request.request_id()
            except Exception:
                request_id = ""
            log.error(self.model_name, request_id, message)
        return self.error_response(message, invalid_argument=kind != "internal")

    def _response(self, request: Any, result: Outputs | Exception) -> Any:
        if isinstance(result, Exception):
            return self._error(request, f"{self.model_name}: {result}", error_kind(result))
        tensors = [self._tensor(name, value) for name, value in result.items()]
        return self.pb_utils.InferenceResponse(output_tensors=tensors)

    def _tensor(self, name: str, value: Any) -> Any:
        """An output tensor: numpy values are cast to the config's dtype; ``torch`` tensors
        (already of that dtype) leave through DLPack, on their device."""
        if isinstance(value, np.ndarray):
            return self.pb_utils.Tensor(
                name, np.ascontiguousarray(value, dtype=self.output_dtypes[name])
            )
        from torch.utils.dlpack import to_dlpack

        return self.pb_utils.Tensor.from_dlpack(name, to_dlpack(value.contiguous()))

    def finalize(self) -> None:
        """Called once when the instance is unloaded: deletes its ``tritonrepo_step_errors_total``
        series from Triton's metrics endpoint (:meth:`StepErrorCounters.close
        <tritonrepo.step.metrics.StepErrorCounters.close>`: after the stub exits it is too
        late). A subclass that creates metrics of its own drops them here too and calls
        ``super().finalize()``."""
        counters = getattr(self, "error_counters", None)
        if counters is not None:
            counters.close()
        monitor = getattr(self, "feature_monitor", None)
        if monitor is not None:
            monitor.close()
