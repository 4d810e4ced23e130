"""A described pipeline served as one Python model, in the form its config names.

``<pipeline>/<version>/model.py`` is one file for every config set of the pipeline's one-step
model (a Python model's code is per version, not per config): ``configs/cpu.pbtxt`` serves the
functions and the ONNX core in one process (:class:`tritonrepo.pipelines.fused_step.FusedStep`),
``configs/torch_gpu.pbtxt`` the three models' own code with the core's ``torch.export`` program
on the GPU (:class:`tritonrepo.pipelines.chained_step.ChainedStep`, named by its
``tritonrepo_stages`` parameter). :class:`OneStep` reads the config and becomes the one it names.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tritonrepo.pipelines.chained_step import STAGES_PARAMETER, ChainedStep
from tritonrepo.pipelines.fused_step import FusedStep


class OneStep:
    """The Python backend's model: :class:`ChainedStep` when the config has the
    ``tritonrepo_stages`` parameter, else :class:`FusedStep`; ``initialize``, ``execute`` and
    ``finalize`` are that step's (errors as there: a request never raises out of ``execute``)."""

    step: FusedStep | ChainedStep

    @staticmethod
    def form(parameters: Mapping[str, Any]) -> type[FusedStep] | type[ChainedStep]:
        """The step class a config with these ``parameters`` (its ``parameters`` map) runs."""
        return ChainedStep if STAGES_PARAMETER in parameters else FusedStep

    def initialize(self, args: dict[str, str]) -> None:
        parameters = json.loads(args["model_config"]).get("parameters", {})
        self.step = self.form(parameters)()
        self.step.initialize(args)

    def execute(self, requests: list[Any]) -> list[Any]:
        return self.step.execute(requests)

    def finalize(self) -> None:
        self.step.finalize()
