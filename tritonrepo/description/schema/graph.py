"""A description of several core models, as types: :class:`GraphPipeline` (named
``[models.<key>]`` tables) and its :class:`GraphStep` list (``[[step]]``). Types only:
:mod:`tritonrepo.description.parse.graph` reads them (its docstring shows the shape)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tritonrepo.description.schema.header import Header
from tritonrepo.description.schema.single_core import Pipeline
from tritonrepo.description.schema.tables import Core, Step


@dataclass(frozen=True)
class GraphStep:
    """One step of the ensemble, in order: a Python step (``python`` set, ``inputs`` the
    pipeline tensors it takes) or a core step (``core`` the ``[models.<key>]`` key;
    ``input_map``/``output_map``: graph tensor name -> pipeline tensor name, only the renamed
    ones)."""

    index: int
    python: Step | None = None
    inputs: tuple[str, ...] = ()
    core: str | None = None
    input_map: Mapping[str, str] | None = None
    output_map: Mapping[str, str] | None = None

    @property
    def where(self) -> str:
        """The step's field in messages: ``step[i]``."""
        return f"step[{self.index}]"


@dataclass(frozen=True, kw_only=True)
class GraphPipeline(Header):
    """A whole graph description: the :class:`~tritonrepo.description.schema.header.Header`
    fields, ``cores`` (key -> core model) and ``steps`` (in order)."""

    cores: Mapping[str, Core]
    steps: tuple[GraphStep, ...]

    @property
    def python_steps(self) -> tuple[GraphStep, ...]:
        """The Python steps, in order."""
        return tuple(s for s in self.steps if s.python is not None)

    @property
    def models(self) -> tuple[str, ...]:
        """The model names: the ensemble, then each step's and core's model."""
        steps = tuple(s.python.model for s in self.python_steps if s.python is not None)
        return (self.name, *steps, *(c.model for c in self.cores.values()))

    @property
    def model_fields(self) -> tuple[str, ...]:
        """The description's field naming each of :attr:`models`."""
        steps = tuple(f"{s.where}.model" for s in self.python_steps)
        return ("name", *steps, *(f"models.{key}.model" for key in self.cores))

    def core_view(self, key: str) -> Pipeline:
        """A single-core :class:`~tritonrepo.description.schema.single_core.Pipeline` around
        core ``key`` (no steps), for the code that handles one core (model source, configs)."""
        empty = Step("", None, None, (), {})
        return Pipeline(
            name=self.name,
            summary=self.summary,
            doc=self.doc,
            max_batch_size=self.max_batch_size,
            inputs=self.inputs,
            outputs=self.outputs,
            preprocess=empty,
            core=self.cores[key],
            postprocess=empty,
            samples=self.samples,
            tests=False,
            source=self.source,
        )
