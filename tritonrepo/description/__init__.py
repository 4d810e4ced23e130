"""The reader of ``pipelines/<name>/pipeline.toml``: a pipeline described once.

Generator-side code (the builders, the server and the tests read descriptions; no step that runs
in Triton's stub imports it; ``tests/layers.py``). Its modules, by responsibility:

* :mod:`~tritonrepo.description.schema`: what a description reads into (:class:`Pipeline`,
  :class:`Tensor`, :class:`Deployment`, :class:`Step`, :class:`Core`), :class:`DescriptionError`
  and the constants (:data:`DTYPES`, :data:`CONFIG_SETS`, name patterns, defaults);
* :mod:`~tritonrepo.description.reader`: typed fields and the shared tables (tensors, config
  sets, ``[probe]``);
* :mod:`~tritonrepo.description.model_tables`: the ``[preprocess]``/``[postprocess]`` steps and
  the ``[model]`` core;
* :mod:`~tritonrepo.description.stateful`: ``[sequence]`` and ``[session]``;
* :mod:`~tritonrepo.description.core_state`: state in the core (``[[sequence.state]]``);
* :mod:`~tritonrepo.description.graph`: several core models (``[models.<key>]``, ``[[step]]``);
* :mod:`~tritonrepo.description.load`: :func:`parse`, :func:`load`, :func:`import_ref`,
  :func:`discover`.

The fields, their defaults and an example are in ``docs/models/add_your_own_model.md``.
"""

from tritonrepo.description.core_state import ModelCall
from tritonrepo.description.graph import GraphPipeline, GraphStep
from tritonrepo.description.load import discover, import_ref, load, parse
from tritonrepo.description.schema import (
    CONFIG_SETS,
    DEFAULT_MAX_BATCH_SIZE,
    DESCRIPTION_FILE,
    DTYPES,
    NAME_PATTERN,
    REF_PATTERN,
    Core,
    Deployment,
    DescriptionError,
    Pipeline,
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
    "Core",
    "Deployment",
    "DescriptionError",
    "GraphPipeline",
    "GraphStep",
    "ModelCall",
    "Pipeline",
    "Step",
    "Tensor",
    "discover",
    "import_ref",
    "load",
    "parse",
]
