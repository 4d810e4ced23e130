"""``torch.export`` programs of described cores whose ``build()`` returns a torch module.

A description whose ``[model]`` has ``build = "package.module:function"`` returning
``(torch.nn.Module, {input: example tensor})`` and a ``[model.torch_gpu]`` table is served in the
``torch_gpu`` set by a program of the same weights:

1. ``make artifacts`` (:mod:`builders.pipeline.build`) exports the module to ONNX for the ``cpu``
   set and saves it, FP32 on the CPU, with its example inputs and the core's inputs for the
   pipeline's samples, to ``<core>/1/module.pt`` (:func:`save_module`): the GPU host exports
   exactly these weights, without calling ``build()`` again (which may train, read data or
   download).
2. ``make artifacts-gpu`` (:mod:`builders.torch_programs.export`) loads it on the serving host,
   exports it in FP16 or FP32 with a dynamic batch of 1 to the ``torch_gpu`` config's
   ``max_batch_size`` (:func:`export_described`) and gates it against the FP32 module on those
   sample inputs (:func:`described_gate`).

The program's inputs are named as the ONNX graph's (the example dict's keys), in that order,
float inputs cast to the program's precision inside it; its outputs are the module's, in order
(the ``torch_python`` backend casts them to the config's types).

``module.pt`` is a pickle (``torch.save`` of the module): it is loaded with
``weights_only=False``, so only load one this checkout wrote.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tritonrepo.description import Pipeline
from tritonrepo_format.config_sets import TORCH_GPU_SET

MODULE_FILE = "module.pt"  # beside model.onnx in the core's version folder
CONFIG_SET = TORCH_GPU_SET


def module_path(repository: Path, pipeline: Pipeline) -> Path:
    """``<repository>/<core>/<first version>/module.pt``."""
    core = pipeline.core
    return repository / core.model / str(core.versions[0]) / MODULE_FILE


def exports_program(pipeline: Pipeline) -> bool:
    """Whether the pipeline's core is built by ``build()`` and has a ``torch_gpu`` program."""
    core = getattr(pipeline, "core", None)
    return core is not None and core.build is not None and CONFIG_SET in core.deployments


def described_cores() -> dict[str, Pipeline]:
    """``{core model: Pipeline}`` of every description whose core :func:`exports_program`."""
    from builders.pipeline.core_owners import described_pipelines

    return {p.core.model: p for p in described_pipelines() if exports_program(p)}


def save_module(
    path: Path, module: Any, examples: Mapping[str, Any], feeds: Mapping[str, np.ndarray]
) -> None:
    """Save ``module`` (moved to the CPU, FP32, eval mode), its example inputs and ``feeds`` (the
    core's inputs for the pipeline's samples, numpy, batch-first) to ``path`` atomically.

    Raises:
        ValueError: an input name is not a Python identifier (the program's inputs are the
            arguments of a generated ``forward``).
    """
    import torch

    bad = [name for name in examples if not name.isidentifier()]
    if bad:
        raise ValueError(
            f"model.build: input names {bad} are not Python identifiers; name the example "
            "inputs like function arguments (e.g. 'pixels', 'input_ids')"
        )
    record = {
        "module": module.to("cpu", torch.float32).eval(),
        "examples": {k: torch.as_tensor(v).cpu() for k, v in examples.items()},
        "feeds": {k: np.asarray(v) for k, v in feeds.items()},
    }
    partial = path.with_name(path.name + ".partial")
    torch.save(record, partial)
    os.replace(partial, path)


def load_module(path: Path) -> dict[str, Any]:
    """What :func:`save_module` wrote: ``{"module", "examples", "feeds"}``.

    Raises:
        FileNotFoundError: ``path`` is missing (``make artifacts`` writes it).
    """
    import torch

    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: run `make artifacts` (it saves the module)")
    return torch.load(path, map_location="cpu", weights_only=False)


def _named_forward(names: list[str]):
    """A module class whose ``forward`` takes exactly ``names`` (so the exported program's
    inputs carry them), casts float inputs to the wrapped module's precision and returns its
    outputs as a tuple."""
    import torch

    arguments = ", ".join(names)
    namespace: dict[str, Any] = {}
    exec(f"def forward(self, {arguments}):\n    return self.run({arguments})\n", namespace)

    class Named(torch.nn.Module):
        def __init__(self, module: torch.nn.Module, dtype: torch.dtype) -> None:
            super().__init__()
            self.module, self.dtype = module, dtype

        def run(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
            cast = [x.to(self.dtype) if x.is_floating_point() else x for x in inputs]
            out = self.module(*cast)
            return tuple(out) if isinstance(out, (tuple, list)) else (out,)

    Named.forward = namespace["forward"]
    return Named


def export_described(
    pipeline: Pipeline, repository: Path, device: str, precision: str, batch: int
) -> tuple[Any, Any, dict[str, np.ndarray], dict[str, list]]:
    """The saved module of ``pipeline``'s core as an exported program on ``device``.

    Returns:
        ``(ExportedProgram, FP32 reference module on device, the saved sample feeds, the
        program's inputs as {name: ["batch", *dims]})``; the batch dim runs 1..``batch``.

    Raises:
        FileNotFoundError: ``module.pt`` is missing (``make artifacts``).
    """
    import copy

    import torch

    saved = load_module(module_path(repository, pipeline))
    dtype = {"fp16": torch.float16, "fp32": torch.float32}[precision]
    names = list(saved["examples"])
    reference = _named_forward(names)(saved["module"], torch.float32).to(device).eval()
    model = _named_forward(names)(copy.deepcopy(saved["module"]).to(device, dtype), dtype).eval()
    # torch.export specializes a batch of 1 to the constant 1 ("Constraints violated (batch)"):
    # an example of one row is traced as two copies of it.
    examples = tuple(
        (x if len(x) > 1 else torch.cat([x, x])).to(device)
        for x in (saved["examples"][n] for n in names)
    )
    dim = torch.export.Dim("batch", min=1, max=batch)
    with torch.no_grad():
        program = torch.export.export(model, examples, dynamic_shapes={n: {0: dim} for n in names})
    inputs = {n: ["batch", *saved["examples"][n].shape[1:]] for n in names}
    return program, reference, saved["feeds"], inputs


def described_gate(
    program: Any, reference: Any, feeds: Mapping[str, np.ndarray], device: str, min_cosine: float
) -> dict[str, float]:
    """Lowest per-row cosine of every float output of ``program`` against the FP32 module on
    the saved sample inputs (integer outputs must be equal).

    Raises:
        RuntimeError: a cosine below ``min_cosine``, or an integer output that differs.
    """
    import torch

    module = program.module()
    args = [torch.as_tensor(np.asarray(v), device=device) for v in feeds.values()]
    with torch.no_grad():
        got, want = module(*args), reference(*args)
    worst = 1.0
    for j, (a, b) in enumerate(zip(got, want, strict=True)):
        if not b.is_floating_point():
            if not torch.equal(a.cpu(), b.cpu()):
                raise RuntimeError(f"accuracy gate: integer output {j} differs from FP32")
            continue
        a, b = (t.float().reshape(len(t), -1) for t in (a, b))
        worst = min(worst, float(torch.nn.functional.cosine_similarity(a, b, dim=1).min()))
    if worst < min_cosine:
        raise RuntimeError(f"accuracy gate: min cosine {worst:.6f} < {min_cosine}")
    return {"min_cosine_vs_fp32": round(worst, 6), "rows": len(args[0])}
