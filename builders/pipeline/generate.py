"""The generator: ``tritonrepo-new pipeline NAME --from pipelines/NAME/pipeline.toml``.

It reads the description, asks which kind it is
(:func:`builders.pipeline.kinds.selection.kind_of`: one core, several models, a session, state
in the core), runs every check of that kind and only then writes what the kind makes into the
model repository: for a single core, the ensemble ``NAME`` and the folders of its three steps
(``config.pbtxt``, ``configs/cpu.pbtxt`` and ``configs/torch_gpu.pbtxt`` where the description
has those sets, the steps' 7-line ``model.py``, a ``.gitkeep`` in every version folder so git
keeps it before ``make artifacts`` fills it), and ``tests/pipelines/test_NAME.py``.

What it wrote is recorded in ``pipelines/NAME/generated_files.json`` (path → SHA-256). A second
run with an unchanged description changes nothing; a file that differs from both the new text
and the recorded one was edited by hand and is left alone (the run fails, naming it) unless
``--force``. A file generated before that the description no longer makes (a config set or
a step renamed away) is removed, unless edited by hand. ``--check`` writes nothing and exits 1
when a file would change.

Before anything else it checks the numpy the Python-backend stubs would import
(:mod:`tritonrepo.server.stub_numpy`), and refuses (exit 1, nothing written) when they could
not serve with it: the pipeline would not serve, and the checks here would judge the functions
by another numpy's rules than the served steps run under (numpy 2 changed type promotion,
NEP 50, so a dtype that passes here may not be the served one).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from builders.metadata import render as render_json
from builders.metadata import write_atomic
from builders.pipeline.kinds.selection import kind_of
from tritonrepo.description import DescriptionError, Header, load
from tritonrepo.paths import MODEL_REPOSITORY, PIPELINES, REPO_ROOT
from tritonrepo.server import stub_numpy

MANIFEST = "generated_files.json"
# After a run that wrote files: build this pipeline's core model and those of the pipelines it
# calls (not every shipped model, as plain `make serve` does), install the HTTP guard's nginx,
# then serve this one (Makefile: serve with MODELS).
NEXT_STEPS = "next: make serve MODELS={name}   (builds its model and what it calls, then serves it)"


@dataclass(frozen=True)
class Change:
    """One planned file: its path (relative to the checkout), new text, and what happens:
    ``create``, ``update``, ``same``, ``remove`` (generated before, no longer described) or
    ``edited`` (changed by hand since generated: left alone, the run fails)."""

    path: str
    text: str
    action: str


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _relative(path: Path) -> str:
    """``path`` relative to the checkout when inside it, else absolute."""
    return path.relative_to(REPO_ROOT).as_posix() if path.is_relative_to(REPO_ROOT) else str(path)


def _manifest(pipeline: Header) -> dict[str, str]:
    path = pipeline.folder / MANIFEST
    return json.loads(path.read_text())["files"] if path.is_file() else {}


def plan(
    pipeline: Header, repository: Path = MODEL_REPOSITORY, force: bool = False
) -> list[Change]:
    """Check ``pipeline`` (a description of any kind) and plan its files (nothing written).

    Raises:
        DescriptionError: a check of its kind failed
            (:meth:`builders.pipeline.kinds.base.Kind.check`).
    """
    recorded = _manifest(pipeline)
    owned = set()  # the model folders this description generated before
    for recorded_path in recorded:
        path = (
            Path(recorded_path) if Path(recorded_path).is_absolute() else REPO_ROOT / recorded_path
        )
        if path.is_relative_to(repository):
            owned.add(path.relative_to(repository).parts[0])
    kind = kind_of(pipeline)
    checked = kind.check(pipeline, repository, owned, force)
    files = kind.files(pipeline, checked, repository, REPO_ROOT)
    changes = []
    for path, text in files.items():
        relative = (
            path.relative_to(REPO_ROOT).as_posix() if path.is_relative_to(REPO_ROOT) else str(path)
        )
        if not path.exists():
            action = "create"
        else:
            current = path.read_text()
            if current == text:
                action = "same"
            elif force or recorded.get(relative) == _digest(current):
                action = "update"
            else:
                action = "edited"
        changes.append(Change(relative, text, action))
    planned = {c.path for c in changes}
    for relative, digest in recorded.items():  # generated before, no longer described
        path = REPO_ROOT / relative
        if relative in planned or not path.is_file():
            continue
        unedited = force or _digest(path.read_text()) == digest
        changes.append(Change(relative, "", "remove" if unedited else "edited"))
    return changes


def write(pipeline: Header, changes: Sequence[Change]) -> None:
    """Write the ``create``/``update`` files and the manifest (every planned file's digest).

    Raises:
        FileExistsError: a file was edited by hand (``edited``); nothing is written.
    """
    edited = [c.path for c in changes if c.action == "edited"]
    if edited:
        raise FileExistsError(
            f"edited by hand since generated: {', '.join(edited)}; move the change into "
            f"{pipeline.source.name} (or pass --force to overwrite)"
        )
    for change in changes:
        path = REPO_ROOT / change.path
        if change.action in ("create", "update"):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(change.text)
        elif change.action == "remove":
            path.unlink()
            for folder in list(path.parents)[:3]:  # version folder, configs/, the model folder
                if folder.is_dir() and not any(folder.iterdir()):
                    folder.rmdir()
    source = pipeline.source
    manifest = {
        "description": (
            source.relative_to(REPO_ROOT).as_posix()
            if source.is_relative_to(REPO_ROOT)
            else str(source)
        ),
        "files": {
            c.path: _digest(c.text)
            for c in sorted(changes, key=lambda c: c.path)
            if c.action != "remove"
        },
    }
    text = render_json(manifest)
    target = pipeline.folder / MANIFEST
    if not target.is_file() or target.read_text() != text:
        write_atomic(target, text)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line (``tritonrepo-new``). Exit 0: written or unchanged; 1: a problem (each on
    its own line) or, with ``--check``, a file that would change; 2: usage."""
    parser = argparse.ArgumentParser(prog="tritonrepo-new", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    cmd = sub.add_parser("pipeline", help="generate (or regenerate) a pipeline's models")
    cmd.add_argument("name", help="the pipeline's name (its description's name field)")
    cmd.add_argument("--from", dest="source", type=Path,
                     help="the description (default pipelines/NAME/pipeline.toml)")  # fmt: skip
    cmd.add_argument("--repository", type=Path, default=MODEL_REPOSITORY)
    cmd.add_argument("--force", action="store_true", help="overwrite hand edits and clashes")
    cmd.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    refused = stub_numpy.refusal("nothing generated")
    if refused:
        print(f"error: {refused}", file=sys.stderr)
        return 1
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))  # pipelines.<name> imports, from any directory
    source = args.source or PIPELINES / args.name / "pipeline.toml"
    try:
        pipeline = load(source)
        if pipeline.name != args.name:
            problem = f"name: {pipeline.name!r} is not {args.name!r}; give the description's name"
            raise DescriptionError(source, [problem])
        changes = plan(pipeline, args.repository.resolve(), args.force)
    except DescriptionError as exc:
        print("\n".join(f"error: {p}" for p in exc.problems), file=sys.stderr)
        return 1
    for change in changes:
        if change.action != "same":
            print(f"{change.action:7} {change.path}")
    stale = [c for c in changes if c.action != "same"]
    if args.check:
        print(f"{len(stale)} of {len(changes)} files would change" if stale else "up to date")
        return 1 if stale else 0
    try:
        write(pipeline, changes)
    except FileExistsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{pipeline.name}: {len(stale)} of {len(changes)} files written" if stale
          else f"{pipeline.name}: up to date ({len(changes)} files)")  # fmt: skip
    if stale:
        print(NEXT_STEPS.format(name=pipeline.name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
