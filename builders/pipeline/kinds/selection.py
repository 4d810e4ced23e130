"""Which kind a description is: :func:`kind_of`, the one place that looks at a description's
shape (the kinds: :mod:`builders.pipeline.kinds`)."""

from __future__ import annotations

from builders.pipeline.kinds.base import Kind
from builders.pipeline.kinds.core_state import CORE_STATE
from builders.pipeline.kinds.graph import GRAPH
from builders.pipeline.kinds.session import SESSION
from builders.pipeline.kinds.single_core import SINGLE_CORE
from tritonrepo.description import GraphPipeline, Header, Pipeline

KINDS: tuple[Kind, ...] = (SINGLE_CORE, GRAPH, SESSION, CORE_STATE)


def kind_of(description: Header) -> Kind:
    """The kind of ``description`` (:func:`tritonrepo.description.load`): several models
    (``[models.<key>]``/``[[step]]``), a session step class (``[[sequence.state]]`` with
    ``step_class``), a session (``[sequence]``, with or without ``[[sequence.state]]``), else
    a single core.

    Raises:
        TypeError: ``description`` is of no known shape.
    """
    if isinstance(description, GraphPipeline):
        return GRAPH
    if not isinstance(description, Pipeline):
        raise TypeError(f"{description!r} is not a description")
    if description.core_state is not None:
        return CORE_STATE
    if description.sequence is not None:
        return SESSION
    return SINGLE_CORE
