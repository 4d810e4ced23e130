"""What a GPU-host builder reads to export a model: the declaration each core's builder module
makes in its ``GPU_SOURCES`` (``{model: Sources}``), which ``builders.gpu_sources`` packs for an
offline GPU host. No dependencies, so any builder module can import it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sources:
    """What a GPU-host builder reads to export one model.

    Attributes:
        builder: the module run as ``python -m <builder>`` on the GPU host.
        files: paths relative to the repository root, written here by ``make artifacts``.
        wheels: distribution names the host lacks, each pinned in ``requirements.txt``.
    """

    builder: str
    files: tuple[str, ...] = ()
    wheels: tuple[str, ...] = ()


TORCH_EXPORT = "builders.torch_programs.export"  # exports every torch_gpu program
