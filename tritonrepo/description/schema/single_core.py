"""A description of one core model, as a type: :class:`Pipeline` (``[preprocess]``, ``[model]``,
``[postprocess]``; or a stateful one: ``[sequence]`` and ``[session]``, with the state in the
session step or in the core).

Three Triton models come from a stateless description, each in its own folder of the model
repository: ``<name>_preprocess`` and ``<name>_postprocess`` (Python backend, the user's
functions behind :class:`tritonrepo.pipelines.function_step.FunctionStep`, or a
:class:`PythonStep` subclass of this repository), the core ``<name>_model`` (a TensorRT plan in
``config.pbtxt``, ONNX Runtime in ``configs/cpu.pbtxt``) and the ensemble ``<name>`` that chains
them. Types only: :mod:`tritonrepo.description.parse.single_core` reads it.
"""

from __future__ import annotations

from dataclasses import dataclass

from tritonrepo.description.schema.header import Header
from tritonrepo.description.schema.options import DriftSpec, OpenAiEmbeddings
from tritonrepo.description.schema.stateful import CoreState, SequenceSpec, SessionSpec
from tritonrepo.description.schema.tables import Core, Step
from tritonrepo_format.roles import OPENAI_EMBEDDINGS_PARAMETER


@dataclass(frozen=True, kw_only=True)
class Pipeline(Header):
    """A whole single-core description (:func:`~tritonrepo.description.load`): the
    :class:`~tritonrepo.description.schema.header.Header` fields and its own tables."""

    preprocess: Step
    core: Core
    postprocess: Step
    sequence: SequenceSpec | None = None  # [sequence]: a stateful pipeline
    session: SessionSpec | None = None  # [session]: its step(state, inputs) function
    core_state: CoreState | None = None  # [[sequence.state]] with [session] step_class
    # torch_gpu set: the pipeline as one Python model on the GPU, not an ensemble
    # (builders/pipeline/serving_forms/chained_gpu.py says when it can be, and why one would)
    one_step_gpu: bool = False
    openai_embeddings: OpenAiEmbeddings | None = None  # [openai_embeddings]: /v1/embeddings
    drift: DriftSpec | None = None  # [drift]: input features counted (tritonrepo.step.drift)

    def drift_parameter(self) -> dict[str, str]:
        """``{"tritonrepo_drift": JSON}`` for the model that receives the requests, or ``{}``."""
        return self.drift.parameter(self.name) if self.drift is not None else {}

    def openai_parameter(self) -> dict[str, str]:
        """``{"tritonrepo_openai_embeddings": JSON}`` for the served configs, or ``{}``."""
        spec = self.openai_embeddings
        if spec is None:
            return {}
        dims = next(t.dims for t in self.outputs if t.name == spec.output)
        return {OPENAI_EMBEDDINGS_PARAMETER: spec.parameter(int(dims[-1]))}

    @property
    def stateful(self) -> bool:
        """True for a pipeline with a ``[sequence]`` table (a session model, no ensemble)."""
        return self.sequence is not None

    @property
    def models(self) -> tuple[str, ...]:
        """The model names: ensemble, preprocess, core, postprocess; for a stateful pipeline
        the session model and the core; with a session step class, the session model alone."""
        if self.core_state is not None and self.session is not None:
            return (self.session.model,)
        if self.session is not None:
            return (self.session.model, self.core.model)
        return (self.name, self.preprocess.model, self.core.model, self.postprocess.model)

    @property
    def model_fields(self) -> tuple[str, ...]:
        """The description's field naming each of :attr:`models`."""
        if self.core_state is not None:
            return ("session.model",)
        if self.session is not None:
            return ("session.model", "model.model")
        return ("name", "preprocess.model", "model.model", "postprocess.model")

    def called_models(self) -> tuple[str, ...]:
        """The models its steps (``calls``) and its session step class (``[session] calls``)
        call through BLS, each once, in that order."""
        called = [*self.preprocess.calls, *self.postprocess.calls]
        if self.core_state is not None:
            called += [c.model for c in self.core_state.calls]
        return tuple(dict.fromkeys(called))
