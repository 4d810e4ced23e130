"""What a description reads into: types only (the parsing is :mod:`tritonrepo.description.parse`).

* :mod:`~tritonrepo.description.schema.tables`: the constants, :class:`DescriptionError` and the
  tables every shape shares (:class:`Tensor`, :class:`Deployment`, :class:`Step`, :class:`Core`);
* :mod:`~tritonrepo.description.schema.header`: :class:`Header`, the fields of every shape;
* :mod:`~tritonrepo.description.schema.single_core`: :class:`Pipeline` (one core model);
* :mod:`~tritonrepo.description.schema.stateful`: ``[sequence]``, ``[session]``, the state a
  core returns, session step classes;
* :mod:`~tritonrepo.description.schema.graph`: :class:`GraphPipeline` (several core models);
* :mod:`~tritonrepo.description.schema.options`: ``[openai_embeddings]``, ``[canary]``,
  ``[drift]``.
"""

from tritonrepo.description.schema.graph import GraphPipeline, GraphStep
from tritonrepo.description.schema.header import Header
from tritonrepo.description.schema.options import CanarySpec, DriftSpec, OpenAiEmbeddings
from tritonrepo.description.schema.single_core import Pipeline
from tritonrepo.description.schema.stateful import (
    CoreState,
    ModelCall,
    SequenceSpec,
    SessionSpec,
    StateTensor,
)
from tritonrepo.description.schema.tables import (
    CONFIG_SETS,
    DEFAULT_MAX_BATCH_SIZE,
    DESCRIPTION_FILE,
    DTYPES,
    NAME_PATTERN,
    REF_PATTERN,
    Core,
    Deployment,
    DescriptionError,
    Step,
    Tensor,
)

__all__ = [
    "CONFIG_SETS",
    "DEFAULT_MAX_BATCH_SIZE",
    "DESCRIPTION_FILE",
    "DTYPES",
    "NAME_PATTERN",
    "REF_PATTERN",
    "CanarySpec",
    "Core",
    "CoreState",
    "Deployment",
    "DescriptionError",
    "DriftSpec",
    "GraphPipeline",
    "GraphStep",
    "Header",
    "ModelCall",
    "OpenAiEmbeddings",
    "Pipeline",
    "SequenceSpec",
    "SessionSpec",
    "StateTensor",
    "Step",
    "Tensor",
]
