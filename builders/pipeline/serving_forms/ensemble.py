"""The ensemble: the pipeline served under its name as Triton's ensemble of its steps' models
(``config.pbtxt``), the serving form of the ``default`` config set (and of any set no one-step
form takes). :func:`ensemble_config` writes an ensemble from its steps (the single-core and the
graph kinds both feed it); :func:`ensemble_files` is the single-core pipeline's: request ->
preprocess -> core -> postprocess -> response (no I/O here)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from builders.pipeline.config_writer import EnsembleStep, ModelConfig, config_text
from builders.pipeline.generated_files import header_comment
from builders.pipeline.kinds.base import Checked
from builders.pipeline.model_configs import tensor_configs
from tritonrepo.description import Header, Pipeline
from tritonrepo_format.roles import PROBE_PARAMETER


def ensemble_config(
    header: Header, steps: Sequence[EnsembleStep], parameters: Mapping[str, str]
) -> str:
    """An ensemble's ``config.pbtxt``: the request and response tensors, ``steps`` in order
    (every model at its latest version), ``parameters`` (the probe first)."""
    config = ModelConfig(
        name=header.name,
        platform="ensemble",
        max_batch_size=header.max_batch_size,
        inputs=tensor_configs(header.inputs),
        outputs=tensor_configs(header.outputs),
        ensemble_steps=tuple(steps),
        parameters=parameters,
        comment=header_comment(header, header.summary, header.doc),
    )
    return config_text(config)


def probe_parameter(probe: str | None) -> dict[str, str]:
    """``{"tritonrepo_probe": JSON}`` (:mod:`tritonrepo_client.control.probe_declaration`), or
    ``{}`` without a probe."""
    return {PROBE_PARAMETER: probe} if probe is not None else {}


def _step(model: str, ins: Iterable[str], outs: Iterable[str]) -> EnsembleStep:
    """A step whose tensors keep their names in the ensemble."""
    return EnsembleStep(model, tuple((n, n) for n in ins), tuple((n, n) for n in outs))


def single_core_config(pipeline: Pipeline, checked: Checked) -> str:
    """The single-core ensemble's ``config.pbtxt``: request -> preprocess -> core ->
    postprocess -> response (preprocess's extra outputs go to postprocess); the probe,
    ``[openai_embeddings]`` and ``[canary]`` as parameters."""
    pre, post = pipeline.preprocess, pipeline.postprocess
    core_in = [t.name for t in checked.core_inputs]
    core_out = [t.name for t in checked.core_outputs]
    extras = [t.name for t in pre.outputs]
    steps = (
        _step(pre.model, [t.name for t in pipeline.inputs], [*core_in, *extras]),
        _step(pipeline.core.model, core_in, core_out),
        _step(post.model, [*core_out, *extras], [t.name for t in pipeline.outputs]),
    )
    parameters = probe_parameter(checked.probe)
    parameters |= pipeline.openai_parameter()
    parameters |= pipeline.canary_parameter()
    return ensemble_config(pipeline, steps, parameters)


def ensemble_files(
    pipeline: Pipeline, checked: Checked, repository: Path, rendered: Mapping[Path, str]
) -> dict[Path, str]:
    """The single-core ensemble's files: its ``config.pbtxt`` and an empty version folder
    (``1/.gitkeep``: an ensemble has no model file). ``rendered`` is not needed."""
    folder = repository / pipeline.name
    return {
        folder / "config.pbtxt": single_core_config(pipeline, checked),
        folder / "1" / ".gitkeep": "",
    }
