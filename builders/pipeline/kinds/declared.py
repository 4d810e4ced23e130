"""Checks of what a description declares for the configs as it is, run by the kinds with their
other checks (:mod:`builders.pipeline.kinds`): the ``[probe]`` table (:func:`probe_table_json`)
and each config set's ``ragged_inputs`` (:func:`check_ragged_inputs`).

Each problem names the description's field and the fix, like the other checks.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from builders.pipeline.kinds.sample_checks import PROBE_LIMIT_BYTES
from builders.pipeline.model_configs import CoreTensor
from tritonrepo.description import Header, Pipeline, Tensor
from tritonrepo_client.control.probe_declaration import (
    PROBE_PARAMETER,
    InvalidProbe,
    declared_probe,
)


def probe_table_json(pipeline: Header, problems: list[str]) -> str | None:
    """The ``[probe]`` table as the ``tritonrepo_probe`` parameter's JSON (None without one).

    Checked: the format (:func:`tritonrepo_client.control.probe_declaration.declared_probe`,
    the reader the health check uses), that every input is a request tensor of the pipeline with
    its dtype and ``[rows, *dims]`` shape (rows 1 to ``max_batch_size``; ``dims`` alone
    when ``max_batch_size`` is 0), that every output
    named is a response tensor, and the size (at most :data:`PROBE_LIMIT_BYTES` bytes).
    Problems are appended to ``problems``.
    """
    if pipeline.probe is None:
        return None
    text = json.dumps(pipeline.probe, separators=(",", ":"))
    config = {
        "parameters": {PROBE_PARAMETER: {"string_value": text}},
        "output": [{"name": t.name} for t in pipeline.outputs],
    }
    try:
        probe = declared_probe(config, pipeline.name)
    except InvalidProbe as exc:
        problems.append(f"probe: {exc}; the format: docs/operations/health.md")
        return None
    assert probe is not None  # [probe] has inputs: description.py refuses it otherwise
    requests = {t.name: t for t in pipeline.inputs}
    for entry in pipeline.probe["inputs"]:
        name, given = entry["name"], entry.get("datatype")
        tensor = requests.get(name)
        if tensor is None:
            problems.append(
                f"probe.inputs: '{name}' is not a request tensor; one of {sorted(requests)}"
            )
            continue
        if given != tensor.dtype:
            problems.append(f"probe.inputs: '{name}' is {tensor.dtype}, not {given}")
        _check_shape(f"probe.inputs: '{name}'", entry["shape"], tensor, pipeline, problems)
    responses = {t.name for t in pipeline.outputs}
    for expected in probe.outputs:
        if expected.name not in responses:
            problems.append(
                f"probe.outputs: '{expected.name}' is not a response tensor; one of "
                f"{sorted(responses)}"
            )
    if len(text) > PROBE_LIMIT_BYTES:
        problems.append(
            f"probe: {len(text)} bytes as JSON, over {PROBE_LIMIT_BYTES}; send a smaller request"
        )
    return text


def _check_shape(
    where: str, shape: Sequence[int], tensor: Tensor, pipeline: Header, problems: list[str]
) -> None:
    """``shape`` against ``tensor``'s dims (-1 = any): ``[rows, *dims]`` with rows 1 to
    ``max_batch_size``, or ``dims`` alone when the pipeline does not batch
    (``max_batch_size = 0``)."""
    batched = pipeline.max_batch_size > 0
    rows, dims = (shape[0], tuple(shape[1:])) if batched and shape else (1, tuple(shape))
    fits = len(dims) == len(tensor.dims) and all(
        d == -1 or d == s for d, s in zip(tensor.dims, dims, strict=True)
    )
    if batched and (not fits or not 1 <= rows <= pipeline.max_batch_size):
        declared = ", ".join(str(d) for d in tensor.dims)
        problems.append(
            f"{where} has shape {list(shape)}; give [rows, {declared}] (-1 = any size), rows "
            f"1 to {pipeline.max_batch_size}"
        )
    elif not fits:
        declared = ", ".join(str(d) for d in tensor.dims)
        problems.append(
            f"{where} has shape {list(shape)}; give [{declared}] (-1 = any size; no batch "
            "dimension: max_batch_size is 0)"
        )


def check_ragged_inputs(
    pipeline: Pipeline,
    core_inputs: Sequence[CoreTensor],
    core_outputs: Sequence[CoreTensor],
    problems: list[str],
) -> None:
    """Each set's ``ragged_inputs`` names inputs of its model: preprocess's (the request
    tensors), the core model's (from the graph or ``[[model.input]]``) or postprocess's (the
    core model's outputs and ``preprocess.outputs``). Problems are appended to ``problems``."""
    models: Iterable[tuple[str, object, Sequence[str]]] = (
        ("preprocess", pipeline.preprocess, [t.name for t in pipeline.inputs]),
        ("model", pipeline.core, [t.name for t in core_inputs]),
        (
            "postprocess",
            pipeline.postprocess,
            [*(t.name for t in core_outputs), *(t.name for t in pipeline.preprocess.outputs)],
        ),
    )
    for where, part, inputs in models:
        for config_set, deployment in getattr(part, "deployments", {}).items():
            field = where if config_set == "default" else f"{where}.{config_set}"
            for name in deployment.ragged_inputs:
                if name not in inputs:
                    problems.append(
                        f"{field}.ragged_inputs: '{name}' is not an input of this model; "
                        f"its inputs: {', '.join(inputs)}"
                    )
