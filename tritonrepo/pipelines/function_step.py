"""The generic Python-backend step of a described pipeline: it runs the description's
``preprocess`` or ``postprocess`` function (:mod:`tritonrepo.pipelines.function_calls`).

A generated ``model_repository/<pipeline>_<step>/1/model.py`` is a one-line subclass::

    class TritonPythonModel(FunctionStep):
        \"\"\"Python-backend entry point; initialize/execute/finalize come from FunctionStep.\"\"\"

and its ``config.pbtxt`` names the function::

    parameters {
      key: "function"
      value { string_value: "pipelines.breast_cancer.steps:preprocess" }
    }
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from tritonrepo.pipelines.function_calls import (
    OutputSpec,
    call_batch,
    output_specs,
)
from tritonrepo.pipelines.step_calls import ModelCallError, Models, Tensors, parse_models
from tritonrepo.step.function_refs import load_function
from tritonrepo.step.parameters import REQUIRED, Parameter
from tritonrepo.step.python_step import Outputs, PythonStep


class FunctionStep(PythonStep):
    """Inputs: the config's inputs, each ``[b, *dims]`` (BYTES: object array of ``bytes``;
    optional inputs a request did not send are absent) → outputs: the config's outputs, each
    ``[b, *dims]`` of the config's dtype, computed by ``function(inputs) -> outputs`` once per
    joinable group of the dynamic batch (:func:`~tritonrepo.pipelines.function_calls.call_batch`).

    Config parameters (:attr:`PARAMETERS`): ``function`` (``package.module:function``, required)
    and ``code_root`` (directory put on ``sys.path``, relative to the model's folder, the one
    holding ``config.pbtxt``; default ``../..``, the checkout root for
    ``model_repository/<model>/``); ``models`` (``key=model,...``, default none): the models the
    function calls through BLS, then called ``function(inputs, models)``
    (:mod:`tritonrepo.pipelines.step_calls`).

    Raises:
        FunctionImportError: from ``initialize``: the function cannot be loaded (the model's
            load fails with the message naming the reference and the fix).
        ValueError: from ``initialize``: an output's data type has no numpy equivalent.

    Per request (as its error; the others of the batch are served): InvalidRequest when the
    function raises ``ValueError``; an internal error when it raises anything else or returns
    outputs that do not fit the config (message names the function, output, expected/got).
    """

    PARAMETERS = (
        Parameter(
            "function",
            "str",
            REQUIRED,
            "module:function",
            "the function this step runs, e.g. pipelines.<name>.steps:preprocess",
        ),
        Parameter(
            "code_root",
            "str",
            "../..",
            "directory",
            "put on sys.path before importing the function; relative to the model's folder",
        ),
        Parameter(
            "models",
            "str",
            "",
            "key=model,...",
            "models the function calls through BLS: it is called function(inputs, models)",
        ),
    )

    function: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]
    function_ref: str
    output_specs: dict[str, OutputSpec]

    def setup(self) -> None:
        self.function_ref = self.settings["function"]
        model_dir = self.version_dir.parent  # Path(args["model_repository"])
        code_root = Path(self.settings["code_root"])
        self.function = load_function(self.function_ref, model_dir / code_root)
        names = parse_models(self.settings["models"])
        if names:
            function, models = self.function, Models(names, self._call_model)
            self.function = lambda inputs: function(inputs, models)
        self.output_specs = output_specs(
            self.model_config["output"], int(self.model_config.get("max_batch_size", 1))
        )

    def prepare(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return inputs

    def run(self, items: list[dict[str, np.ndarray]]) -> list[Outputs | Exception]:
        return call_batch(self.function, items, self.output_specs, ref=self.function_ref)

    def _call_model(self, model: str, feeds: Tensors) -> Tensors:
        """``model`` on ``feeds`` through BLS: all of its outputs, in host memory.

        Raises:
            ModelCallError: the model answered with an error.
        """
        pb = self.pb_utils
        request = pb.InferenceRequest(
            model_name=model,
            requested_output_names=[],  # none named: every output comes back
            inputs=[pb.Tensor(name, value) for name, value in feeds.items()],
        )
        response = request.exec()
        if response.has_error():
            raise ModelCallError(f"{model}: {response.error().message()}")
        # Copied: the arrays of a BLS response live only as long as the response object.
        return {t.name(): np.array(self.host_array(t)) for t in response.output_tensors()}
