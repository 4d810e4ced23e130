"""The reader of ``pipelines/<name>/pipeline.toml``: a pipeline described once.

Generator-side code (the builders, the server and the tests read descriptions; no step that runs
in Triton's stub imports it; ``tests/layers.py``). The types are apart from the reading:

* :mod:`~tritonrepo.description.schema`: what a description reads into, types only: the shared
  tables (:class:`Tensor`, :class:`Deployment`, :class:`Step`, :class:`Core`), :class:`Header`
  (the fields of every shape), :class:`Pipeline` (one core model, stateless or stateful),
  :class:`GraphPipeline` (several), the stateful and optional tables, :class:`DescriptionError`
  and the constants (:data:`DTYPES`, :data:`CONFIG_SETS`, name patterns, defaults);
* :mod:`~tritonrepo.description.parse`: reading each table from the TOML, every problem
  collected (:class:`~tritonrepo.description.parse.reader.Reader`);
* :mod:`~tritonrepo.description.load`: :func:`load` (the file, either shape), :func:`import_ref`,
  :func:`discover`.

The fields, their defaults and an example are in ``docs/models/add_your_own_model.md``.
"""

from tritonrepo.description.load import discover, import_ref, load
from tritonrepo.description.parse.single_core import parse
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
    GraphPipeline,
    GraphStep,
    Header,
    ModelCall,
    Pipeline,
    StateTensor,
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
    "Header",
    "ModelCall",
    "Pipeline",
    "StateTensor",
    "Step",
    "Tensor",
    "discover",
    "import_ref",
    "load",
    "parse",
]
