"""Which described pipelines a build runs, and in which order (``python -m
builders.pipeline.build``): a pipeline after those whose models it calls (:func:`build_order`),
the named pipelines with the ones they call (:func:`with_calls`, ``--with-calls``, what ``make
serve MODELS=...`` builds), and the refusal of a pipeline that was described but not generated
yet (:func:`not_generated`), before anything is built.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tritonrepo.description import DescriptionError, Header


def called_pipelines(pipelines: Sequence[Header]) -> dict[str, set[str]]:
    """``{pipeline name: names of the other pipelines among ``pipelines`` whose models it calls
    through BLS}`` (:meth:`tritonrepo.description.Header.called_models`: ``calls`` of its steps
    or its session; a graph description's steps call only its own models)."""
    owner = {model: p.name for p in pipelines for model in p.models if model}
    needs: dict[str, set[str]] = {}
    for p in pipelines:
        called = p.called_models()
        needs[p.name] = {owner[m] for m in called if m in owner and owner[m] != p.name}
    return needs


def build_order(pipelines: Sequence[Header]) -> list[Header]:
    """``pipelines`` with each one after the pipelines whose models it calls through BLS
    (``calls`` of its steps or its session): ctr_session's core graph is built from
    ctr_ranking's ctr_model. Otherwise in the given order.

    Raises:
        DescriptionError: the calls form a cycle (named).
    """
    needs = called_pipelines(pipelines)
    ordered: list[Header] = []
    done: set[str] = set()
    pending = list(pipelines)
    while pending:
        ready = [p for p in pending if needs[p.name] <= done]
        if not ready:
            names = ", ".join(p.name for p in pending)
            raise DescriptionError(pending[0].source, [f"calls: a cycle among {names}"])
        ordered.extend(ready)
        done.update(p.name for p in ready)
        pending = [p for p in pending if p.name not in done]
    return ordered


def with_calls(named: Sequence[Header], described: Sequence[Header]) -> list[Header]:
    """``named`` and every pipeline of ``described`` whose models they call, at any depth (a
    pipeline of ``named`` wins over a description of the same name in ``described``); in
    ``described`` order, then the named ones not in it. Not ordered for building: see
    :func:`build_order`."""
    by_name = {p.name: p for p in described} | {p.name: p for p in named}
    needs = called_pipelines(list(by_name.values()))
    wanted: set[str] = set()
    pending = [p.name for p in named]
    while pending:
        name = pending.pop()
        if name not in wanted:
            wanted.add(name)
            pending.extend(needs[name])
    return [p for name, p in by_name.items() if name in wanted]


def not_generated(pipelines: Sequence[Header], repository: Path) -> list[str]:
    """The names of ``pipelines`` that were described but not generated into ``repository``
    yet: one of their models has no ``config.pbtxt`` there. Building such a core would leave a
    model folder that makes the generator refuse the name (a clash), and its drift profile has
    no folder to go into."""
    return [
        p.name
        for p in pipelines
        if any(not (repository / model / "config.pbtxt").is_file() for model in p.models if model)
    ]
