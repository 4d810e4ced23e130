"""The wiring of a graph description's steps (:func:`check_wiring`), checked before anything
runs: a step takes only request tensors or outputs of earlier steps (so the steps can never
form a cycle); a tensor is made once; a core step's graph inputs get tensors of their dtype and
of compatible dims (``-1`` matches any size: :meth:`tritonrepo.description.Tensor.fits`); every
request tensor is used and every response tensor is made, with its declared dtype and dims.
Each problem names its field and the fix."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from builders.pipeline.model_configs import CoreTensor
from tritonrepo.description import GraphPipeline, Tensor


@dataclass(frozen=True)
class Wiring:
    """What the wiring established: per Python step (by index) its input and output tensors,
    and per step the tensors its outputs name that a later step takes or the response answers
    (``mapped_outputs``: the ensemble maps only those)."""

    step_inputs: Mapping[int, tuple[Tensor, ...]]
    step_outputs: Mapping[int, tuple[Tensor, ...]]
    mapped_outputs: Mapping[int, tuple[str, ...]]


def _show(t: Tensor) -> str:
    return f"{t.dtype} {list(t.dims)}"


def check_wiring(
    pipeline: GraphPipeline,
    core_in: Mapping[str, tuple[CoreTensor, ...]],
    core_out: Mapping[str, tuple[CoreTensor, ...]],
    problems: list[str],
) -> Wiring:
    """The static wiring (module docstring) of ``pipeline``'s steps around its cores' tensors
    (``core_in``/``core_out``: by core key, as the configs declare them); problems are appended
    to ``problems``."""
    available: dict[str, tuple[Tensor, str]] = {t.name: (t, "input") for t in pipeline.inputs}
    used: set[str] = set()
    step_in: dict[int, tuple[Tensor, ...]] = {}
    step_out: dict[int, tuple[Tensor, ...]] = {}
    made: dict[int, list[str]] = {}

    def take(name: str, field: str, want: Tensor | None) -> Tensor | None:
        if name not in available:
            known = ", ".join(available)
            problems.append(
                f"{field}: '{name}' is neither a request tensor nor an output of an "
                f"earlier step (a step takes what the steps listed before it make); known: {known}"
            )
            return None
        got, _ = available[name]
        used.add(name)
        if want is not None and not got.fits(want):
            problems.append(
                f"{field}: '{name}' is {_show(got)}, the model's input "
                f"'{want.name}' is {_show(want)}; make them agree"
            )
        return got

    def make(name: str, tensor: Tensor, field: str, index: int) -> None:
        if name in available:
            problems.append(
                f"{field}: tensor '{name}' is already made by "
                f"{available[name][1]}; rename one of them"
            )
            return
        available[name] = (Tensor(name, tensor.dtype, tensor.dims), f"step[{index}]")
        made.setdefault(index, []).append(name)

    for step in pipeline.steps:
        where = step.where
        if step.python is not None:
            ins = [take(n, f"{where}.inputs", None) for n in step.inputs]
            step_in[step.index] = tuple(t for t in ins if t is not None)
            step_out[step.index] = step.python.outputs
            if not step.python.outputs:
                problems.append(f"{where}.outputs: add the tensors the function returns")
            for t in step.python.outputs:
                make(t.name, t, f"{where}.outputs", step.index)
            continue
        key = step.core or ""
        if key not in core_in:
            continue
        in_map, out_map = step.input_map or {}, step.output_map or {}
        graph_in = {c.name for c in core_in[key]}
        graph_out = {c.name for c in core_out[key]}
        for field, names, graph in (("inputs", in_map, graph_in), ("outputs", out_map, graph_out)):
            for g in names:
                if g not in graph:
                    problems.append(
                        f"{where}.{field}: the model has no {field[:-1]} '{g}'; its "
                        f"{field}: {', '.join(sorted(graph))}"
                    )
        for c in core_in[key]:
            take(in_map.get(c.name, c.name), f"{where}.inputs", c.as_tensor())
        for c in core_out[key]:
            make(out_map.get(c.name, c.name), c.as_tensor(), f"{where}.outputs", step.index)
    for t in pipeline.outputs:
        got = take(t.name, "output", None)
        if got is not None and not got.fits(t):
            problems.append(
                f"output: '{t.name}' is made as {_show(got)} by "
                f"{available[t.name][1]}, declared {_show(t)}; make them agree"
            )
    for t in pipeline.inputs:
        if t.name not in used:
            problems.append(
                f"input: request tensor '{t.name}' is taken by no step; take it in "
                "a step's inputs or drop it"
            )
    mapped = {i: tuple(n for n in names if n in used) for i, names in made.items()}
    return Wiring(step_in, step_out, mapped)
