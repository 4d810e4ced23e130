"""The serving forms of a single-core pipeline, keyed by config set: how the model under the
pipeline's name serves in each set, one step after its kind (:mod:`builders.pipeline.kinds`).

===============  ============================================================================
config set       serving form
===============  ============================================================================
``default``      the ensemble of its step models and core (``config.pbtxt``;
                 :mod:`~builders.pipeline.serving_forms.ensemble`), always
``cpu``          the fused one-step CPU model (``configs/cpu.pbtxt``, the functions and ONNX
                 Runtime in one ``execute``; :mod:`~builders.pipeline.serving_forms.fused_cpu`),
                 unless :func:`~.fused_cpu.fused_refusal` says why not
``torch_gpu``    the chained one-step GPU model (``configs/torch_gpu.pbtxt``, the three models'
                 code in one ``execute``; :mod:`~builders.pipeline.serving_forms.chained_gpu`),
                 when the description asks for it (``one_step_gpu = true``)
===============  ============================================================================

A set no one-step form takes serves the ensemble (Triton falls back to ``config.pbtxt``). The
step models and the core keep their own configs in every set, so the ensemble can serve there
too. The other kinds have no serving forms: a graph description is its own ensemble, a stateful
one its session model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from builders.pipeline.kinds.base import Checked
from builders.pipeline.serving_forms.chained_gpu import CHAINED_SET, chained_files, chained_refusal
from builders.pipeline.serving_forms.ensemble import ensemble_files
from builders.pipeline.serving_forms.fused_cpu import FUSED_SET, fused_files, fused_refusal
from tritonrepo.description import Pipeline
from tritonrepo_format.config_sets import DEFAULT_SET

FormFiles = Callable[[Pipeline, Checked, Path, Mapping[Path, str]], dict[Path, str]]


@dataclass(frozen=True)
class ServingForm:
    """How the pipeline's own model serves in ``config_set``: ``refusal(pipeline)`` says why a
    pipeline cannot be served so (None: it can), ``files(pipeline, checked, repository,
    rendered)`` makes the form's files (``rendered``: the step and core configs made before)."""

    name: str
    config_set: str
    refusal: Callable[[Pipeline], str | None]
    files: FormFiles


def _always(pipeline: Pipeline) -> str | None:
    return None


FORMS: Mapping[str, ServingForm] = {
    form.config_set: form
    for form in (
        ServingForm("ensemble", DEFAULT_SET, _always, ensemble_files),
        ServingForm("fused one-step CPU model", FUSED_SET, fused_refusal, fused_files),
        ServingForm("chained one-step GPU model", CHAINED_SET, chained_refusal, chained_files),
    )
}


def serving_forms(pipeline: Pipeline) -> dict[str, ServingForm]:
    """``{config set: form}`` of the forms ``pipeline`` is served in (module docstring)."""
    return {s: form for s, form in FORMS.items() if form.refusal(pipeline) is None}


def form_files(
    pipeline: Pipeline, checked: Checked, repository: Path, rendered: Mapping[Path, str]
) -> dict[Path, str]:
    """The files of every form ``pipeline`` is served in. Two forms may write the same file
    (both one-step models' ``model.py``) only with the same text."""
    files: dict[Path, str] = {}
    for form in serving_forms(pipeline).values():
        for path, text in form.files(pipeline, checked, repository, rendered).items():
            assert files.get(path, text) == text, f"{path}: two serving forms write it"
            files[path] = text
    return files
