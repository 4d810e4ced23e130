"""AOTInductor packages of the exported programs (``builders.torch_programs.export --format
aotinductor``): what NVIDIA's container serves with Triton's PyTorch backend (``platform:
"torch_aoti"``, r26.05 and later), and what the ``torch_gpu`` set's runner
(``tritonrepo.runners.torch_runner``) serves too, where PyTorch's package loader works
(docs/known_issues.md).

``torch._inductor.aoti_compile_and_package`` compiles the exported program's graph with
Inductor (fused Triton kernels on a GPU, C++ on a CPU) into a ``.pt2`` package that keeps the
exported batch (and sequence) ranges. The package is gated against FP32 like the exported program
(:class:`CompiledProgram` is called as the exported program's module is), so the figures in the
build metadata are those of the file that serves.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any


def compile_package(program: Any, target: Path) -> float:
    """Compile the exported ``program`` into the AOTInductor package ``target`` (a ``.pt2``
    name, as the packager requires).

    Returns:
        The compile time in seconds.

    Raises:
        RuntimeError: Inductor could not compile the program (e.g. no C++ compiler on the
            host); PyTorch's message says why.
    """
    import torch

    started = time.perf_counter()
    try:
        torch._inductor.aoti_compile_and_package(program, package_path=str(target))
    except Exception as exc:  # Inductor raises many kinds; the build reports one
        raise RuntimeError(f"AOTInductor could not compile the program: {exc}") from exc
    return time.perf_counter() - started


class CompiledProgram:
    """An AOTInductor package loaded on ``device``, called as an exported program's module:
    positional inputs in the program's order; one output returned as the tensor, several as a
    tuple."""

    def __init__(self, package: Path, device: str) -> None:
        import torch

        from tritonrepo.runners.torch_runner import load_compiled

        self._model = load_compiled(package, torch.device(device))

    def module(self) -> CompiledProgram:
        """Itself (the exported program's ``module()`` is what the gates call)."""
        return self

    def __call__(self, *args: Any) -> Any:
        outputs = self._model(*args)
        return outputs[0] if len(outputs) == 1 else tuple(outputs)


def check_container_config(
    repository: Path, model: str, inputs: list[str], outputs: list[str], returned: int
) -> None:
    """Check ``model``'s ``torch_aoti`` config (NVIDIA's container), if it has one, against the
    program about to be built: its ``forward`` arguments (``inputs``, in order) and its
    ``returned`` outputs, named as the ``torch_gpu`` config names them (``outputs``, the order
    the development runner reads them in).

    Raises:
        ValueError: the PyTorch backend would refuse the config or feed a tensor to another
            argument or output (:func:`tritonrepo_format.torch_aoti.problems`).
    """
    from tritonrepo_format import torch_aoti
    from tritonrepo_format.config_sets import TORCH_AOTI_SET, set_file
    from tritonrepo_format.configs import load_config

    path = repository / model / set_file(TORCH_AOTI_SET)
    if not path.is_file():
        return
    found = torch_aoti.problems(load_config(path), inputs, outputs)
    if returned != len(outputs):
        found.append(f"the program returns {returned} outputs, the torch_gpu config names "
                     f"{len(outputs)}")  # fmt: skip
    if found:
        raise ValueError(f"{path}: " + "; ".join(found))
