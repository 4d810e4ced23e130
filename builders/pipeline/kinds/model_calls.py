"""The check of the models a session step class calls through BLS (``[session] calls``, state in
the core): each must be declared by a description (its core model, ``pipelines/*/pipeline.toml``)
or be in the model repository, and the tensors the call declares must fit that model's inputs
and outputs (:meth:`tritonrepo.description.Tensor.fits`)."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from pathlib import Path

from tritonrepo.description import DescriptionError, ModelCall, Pipeline, Tensor, discover, load
from tritonrepo.paths import PIPELINES
from tritonrepo_format.configs import load_config


def _described(model: str, pipelines: Path) -> tuple[tuple[Tensor, ...], tuple[Tensor, ...], str]:
    """The declared I/O of ``model`` as a description's core declares it, and that
    description's path; empty when no description declares it with its I/O."""
    for path in discover(pipelines):
        try:
            pipeline = load(path)
        except DescriptionError:
            continue  # its own run reports it
        if isinstance(pipeline, Pipeline) and pipeline.core.model == model and pipeline.core.inputs:
            return pipeline.core.inputs, pipeline.core.outputs, path.parent.name
    return (), (), ""


def _configured(model: str, repository: Path) -> tuple[tuple[Tensor, ...], tuple[Tensor, ...]]:
    """The I/O of ``model``'s ``config.pbtxt`` in ``repository`` (empty when it has none)."""
    from tritonclient.grpc import model_config_pb2 as mc

    path = repository / model / "config.pbtxt"
    if not path.is_file():
        return (), ()
    cfg = load_config(path)

    def tensors(items) -> tuple[Tensor, ...]:
        out = []
        for t in items:
            dtype = mc.DataType.Name(t.data_type).removeprefix("TYPE_")
            out.append(Tensor(t.name, "BYTES" if dtype == "STRING" else dtype, tuple(t.dims),
                              getattr(t, "optional", False)))  # fmt: skip
        return tuple(out)

    return tensors(cfg.input), tensors(cfg.output)


def _shown(t: Tensor) -> str:
    return f"{t.name} {t.dtype} {list(t.dims)}"


def check_calls(calls: Sequence[ModelCall], where: str, repository: Path, problems: list[str],
                pipelines: Path = PIPELINES) -> None:  # fmt: skip
    """Each call of ``calls`` (field ``where``): the model exists and the declared tensors fit.

    Problems (added to ``problems``, each naming the field and the fix): no such model; a sent
    tensor the model does not take, or of another dtype or shape; a required input not sent
    (when the call declares its inputs); a read tensor the model does not return.
    """
    known = sorted({p.parent.name for p in repository.glob("*/config.pbtxt")})
    for i, call in enumerate(calls):
        at = f"{where}[{i}]"
        inputs, outputs, source = _described(call.model, pipelines)
        if not inputs:
            inputs, outputs = _configured(call.model, repository)
            source = f"{repository.name}/{call.model}/config.pbtxt"
        else:
            source = f"pipelines/{source}/pipeline.toml"
        if not inputs and not outputs:
            close = difflib.get_close_matches(call.model, known, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            problems.append(
                f"{at}: no model '{call.model}' is declared by a description or in "
                f"{repository.name}/{hint}; generate the pipeline that declares it first "
                "(tritonrepo-new pipeline <its name>), or fix the name"
            )
            continue
        for kind, sent, declared in (("input", call.inputs, inputs),
                                     ("output", call.outputs, outputs)):  # fmt: skip
            by_name = {t.name: t for t in declared}
            for t in sent:
                match = by_name.get(t.name)
                if match is None:
                    problems.append(
                        f"{at}.{kind}: '{call.model}' has no {kind} '{t.name}' ({source}); its "
                        f"{kind}s: {', '.join(_shown(d) for d in declared)}"
                    )
                elif not t.fits(match):
                    problems.append(
                        f"{at}.{kind}: {_shown(t)} does not fit '{call.model}''s {_shown(match)} "
                        f"({source}; -1 = any); declare what the model takes"
                    )
        if call.inputs:
            names = {t.name for t in call.inputs}
            missing = [t.name for t in inputs if not t.optional and t.name not in names]
            if missing:
                problems.append(
                    f"{at}.input: the call does not send {missing}, which '{call.model}' "
                    f"requires ({source}); declare them"
                )
