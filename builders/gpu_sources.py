"""What an offline GPU host needs for a config set's artifacts (``scripts/offline_gpu_host``).

The list comes from the preflight (:func:`tritonrepo.server.preflight.required_artifacts`, the files
its checks require for the models and everything they depend on), each file sorted by what makes it:

* in git (``model.py``, configs): the checkout has it, nothing is carried;
* ``make artifacts`` (``tokenizer.json``, ``labels.txt``, ``model.onnx``): built here, carried;
* ``make artifacts-gpu`` (``model.pt2``, ``torch_metadata.json``): exported on the GPU host by the
  model's builder, so the *sources* that builder reads are carried (:func:`declared_sources`:
  files built here and wheels pinned in ``requirements.txt``, as the ``GPU_SOURCES`` of the
  model's builder module declares them, e.g. ``builders/onnx_export/text_embedding.py``).

A TensorRT plan (``make build-plans``) cannot be built there (no TensorRT), and a GPU-host program
whose model has no declared sources cannot be packed: both raise :class:`PackError`.

Usage::

    python -m builders.gpu_sources list   [--model M ...] [--model-config-name torch_gpu]
    python -m builders.gpu_sources stage DIR [...]   # DIR/files/<path>, DIR/source-wheels.txt
    python -m builders.gpu_sources builders [...]    # builder modules of the GPU-host programs
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from builders.host_sources import TORCH_EXPORT, Sources
from tritonrepo.paths import MODEL_REPOSITORY, REPO_ROOT
from tritonrepo.server.artifact_checks import (
    MAKE_ARTIFACTS,
    MAKE_ARTIFACTS_GPU,
    MAKE_BUILD_PLANS,
    TRACKED,
)
from tritonrepo.server.preflight import required_artifacts
from tritonrepo_format.config_sets import TORCH_GPU_SET

CONFIG_SET = TORCH_GPU_SET
SOURCE_WHEELS_FILE = "source-wheels.txt"  # requirement names, one a line, pinned by pack.sh


def declared_sources() -> dict[str, Sources]:
    """``{model: Sources}``: every GPU-host program's sources, as the builder module of each
    described core declares them in its ``GPU_SOURCES`` (``{model: Sources}``, e.g.
    ``builders/onnx_export/ctr.py``; the modules come from the descriptions,
    ``builders.pipeline.core_owners``). A module declares only models it owns. A core whose
    ``build()`` returns a torch module needs the module ``make artifacts`` saved
    (:mod:`builders.torch_programs.described_export`).

    Raises:
        ValueError: a module declares sources for a model it does not own (``MODELS``).
    """
    from builders.pipeline.core_owners import owners
    from builders.torch_programs import described_export

    found: dict[str, Sources] = {}
    root = MODEL_REPOSITORY.relative_to(REPO_ROOT)
    for model, pipeline in described_export.described_cores().items():
        saved = described_export.module_path(root, pipeline).as_posix()
        found[model] = Sources(TORCH_EXPORT, files=(saved,))
    table = owners()
    for module in dict.fromkeys(o.builder for o in table.values() if o.builder is not None):
        for model, sources in getattr(importlib.import_module(module), "GPU_SOURCES", {}).items():
            if table.get(model) is None or table[model].builder != module:
                raise ValueError(f"{module}.GPU_SOURCES names '{model}', which it does not build")
            found[model] = sources
    return found


class PackError(RuntimeError):
    """A required file that the offline GPU host can neither receive nor build."""


@dataclass
class PackList:
    """A config set's required files by what makes them; paths relative to the repository root.

    Attributes:
        files: to carry (built here), required files and GPU-host builders' source files.
        wheels: source wheels to carry (distribution names).
        tracked: in git, so in the checkout.
        gpu_built: exported on the GPU host, by ``builders`` (model -> builder module).
    """

    files: list[str] = field(default_factory=list)
    wheels: list[str] = field(default_factory=list)
    tracked: list[str] = field(default_factory=list)
    gpu_built: list[str] = field(default_factory=list)
    builders: dict[str, str] = field(default_factory=dict)

    def add(self, bucket: list[str], item: str) -> None:
        if item not in bucket:
            bucket.append(item)


def default_pack_models(
    repository: Path = MODEL_REPOSITORY, config_name: str = CONFIG_SET
) -> tuple[str, ...]:
    """The launcher's default models (:func:`tritonrepo.server.options.default_models`) that
    ``config_name`` serves without TensorRT: those none of whose required files is a TensorRT
    plan (a pipeline whose core is a plan in ``config.pbtxt`` and that has no config of this
    set is left to hosts with NVIDIA's container)."""
    from tritonrepo.server.options import default_models

    return tuple(
        model
        for model in default_models(repository)
        if all(
            a.build != MAKE_BUILD_PLANS
            for a in required_artifacts(repository, [model], config_name)
        )
    )


def pack_list(
    repository: Path = MODEL_REPOSITORY,
    models: Sequence[str] | None = None,
    config_name: str = CONFIG_SET,
) -> PackList:
    """Sort every file the preflight requires for ``models`` (default:
    :func:`default_pack_models`) under ``config_name`` (see the module docstring).

    Raises:
        PackError: a required TensorRT plan, or a GPU-host program without declared sources
            (:func:`declared_sources`).
        ValueError: ``repository`` is outside the repository root.
    """
    pack = PackList()
    declared = declared_sources()
    root_relative = PurePosixPath(repository.resolve().relative_to(REPO_ROOT).as_posix())
    for artifact in required_artifacts(
        repository, models or default_pack_models(repository, config_name), config_name
    ):
        path = str(root_relative / artifact.path)
        if artifact.build == TRACKED:
            pack.add(pack.tracked, path)
        elif artifact.build == MAKE_ARTIFACTS:
            pack.add(pack.files, path)
        elif artifact.build == MAKE_ARTIFACTS_GPU:
            sources = declared.get(artifact.model)
            if sources is None:
                raise PackError(
                    f"{path} is built on the GPU host, but its builder module declares no "
                    f"sources for '{artifact.model}' (GPU_SOURCES in the module that the "
                    f"model's description names as its builder)"
                )
            pack.add(pack.gpu_built, path)
            pack.builders[artifact.model] = sources.builder
            for source in sources.files:
                pack.add(pack.files, source)
            for wheel in sources.wheels:
                pack.add(pack.wheels, wheel)
        else:
            raise PackError(f"{path} needs `{artifact.build}`, which an offline GPU host lacks")
    return pack


def stage(pack: PackList, dest: Path, root: Path = REPO_ROOT) -> int:
    """Copy ``pack.files`` to ``dest/files/<path>`` and write ``dest/source-wheels.txt``.

    Returns:
        Bytes copied.

    Raises:
        FileNotFoundError: a file to carry is missing here (run ``make artifacts``).
    """
    total = 0
    for path in pack.files:
        source = root / path
        if not source.is_file():
            raise FileNotFoundError(f"{path} is missing: run `make artifacts` before packing")
        target = dest / "files" / path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
        total += source.stat().st_size
    dest.mkdir(parents=True, exist_ok=True)
    (dest / SOURCE_WHEELS_FILE).write_text("".join(f"{w}\n" for w in pack.wheels))
    return total


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["list", "stage", "builders"])
    parser.add_argument("dest", nargs="?", type=Path, help="stage: the staging folder")
    parser.add_argument("--repository", type=Path, default=MODEL_REPOSITORY)
    parser.add_argument(
        "--model",
        dest="models",
        action="append",
        help="default: the launcher's default models that need no plan",
    )
    parser.add_argument("--model-config-name", default=CONFIG_SET)
    args = parser.parse_args(argv)
    try:
        pack = pack_list(args.repository, args.models, args.model_config_name)
        if args.command == "list":
            for name in ("files", "wheels", "tracked", "gpu_built"):
                for item in getattr(pack, name):
                    print(f"{name}\t{item}")
        elif args.command == "builders":
            print("\n".join(dict.fromkeys(pack.builders.values())))
        else:
            if args.dest is None:
                parser.error("stage needs DEST")
            size = stage(pack, args.dest)
            print(f"staged {len(pack.files)} files ({size / 2**20:.1f} MiB), "
                  f"{len(pack.wheels)} source wheels", file=sys.stderr)  # fmt: skip
    except (PackError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
