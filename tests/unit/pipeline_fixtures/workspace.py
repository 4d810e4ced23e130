"""A throw-away checkout for the generator (:class:`Workspace`): ``<root>/pipelines/toy/
pipeline.toml`` and ``<root>/model_repository`` under a temporary folder.

``builders.pipeline.generate`` writes paths relative to its ``REPO_ROOT`` (the manifest's
``description``, the tests module ``tests/pipelines/test_<name>.py``), so the tests point that
name at the workspace's root (``monkeypatch``): nothing lands in the real checkout.
"""

from __future__ import annotations

import contextlib
import io
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from builders.pipeline import generate
from tritonrepo.description import Pipeline, load

PACKAGE = "tests.unit.pipeline_fixtures.toy"
TOY_TOML = f"""\
name = "toy"
summary = "Toy: four numbers and a tag in, two scores and a label out."
max_batch_size = 8

[[input]]
name = "X"
dtype = "FP32"
dims = [4]

[[input]]
name = "TAG"
dtype = "BYTES"
dims = [1]

[[output]]
name = "SCORES"
dtype = "FP32"
dims = [2]

[[output]]
name = "LABEL"
dtype = "BYTES"
dims = [1]

[preprocess]
function = "{PACKAGE}.steps:preprocess"
outputs = [{{ name = "TAG_LENGTH", dtype = "INT32", dims = [1] }}]

[model]
build = "{PACKAGE}.model:build"

[postprocess]
function = "{PACKAGE}.steps:postprocess"

[samples]
function = "{PACKAGE}.samples:samples"
"""
# An unrelated model already in the repository (must survive every run untouched).
OTHER_MODEL = "other_model"
OTHER_CONFIG = 'name: "other_model"\nbackend: "python"\nmax_batch_size: 4\n'


def edited(text: str, old: str, new: str) -> str:
    """``text`` with its one ``old`` replaced by ``new`` (fails when ``old`` is not there once,
    so a test cannot silently run the unchanged description)."""
    assert text.count(old) == 1, f"{old!r} occurs {text.count(old)} times"
    return text.replace(old, new)


@dataclass
class Result:
    """One ``tritonrepo-new`` run: exit status and what it printed."""

    rc: int
    out: str
    err: str


class Workspace:
    """A fake checkout root with the toy description and a model repository."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = root
        self.repository = root / "model_repository"
        self.description = root / "pipelines" / "toy" / "pipeline.toml"
        self.manifest = self.description.parent / generate.MANIFEST
        self.tests_module = root / "tests" / "pipelines" / "test_toy.py"
        self.description.parent.mkdir(parents=True)
        (self.repository / OTHER_MODEL).mkdir(parents=True)
        (self.repository / OTHER_MODEL / "config.pbtxt").write_text(OTHER_CONFIG)
        self.write_description(TOY_TOML)
        monkeypatch.setattr(generate, "REPO_ROOT", root)
        monkeypatch.setattr(sys, "path", list(sys.path))  # main() prepends REPO_ROOT

    def write_description(self, text: str) -> None:
        """Replace the description's text."""
        self.description.write_text(text)

    def edit_description(self, old: str, new: str) -> None:
        """Replace ``old`` (once in the description) with ``new``."""
        self.write_description(edited(self.description.read_text(), old, new))

    def load(self) -> Pipeline:
        """The description, read."""
        return load(self.description)

    def run(self, *flags: str, repository: Path | None = None) -> Result:
        """``tritonrepo-new pipeline toy --from <description> --repository <repo> FLAGS``."""
        out, err = io.StringIO(), io.StringIO()
        argv = ["pipeline", "toy", "--from", str(self.description)]
        argv += ["--repository", str(repository or self.repository), *flags]
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = generate.main(argv)
        return Result(rc, out.getvalue(), err.getvalue())

    def snapshot(self) -> dict[str, tuple[bytes, int]]:
        """Every file under the root: relative path -> (content, mtime in ns)."""
        return {
            p.relative_to(self.root).as_posix(): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in sorted(self.root.rglob("*"))
            if p.is_file()
        }

    def files(self) -> set[str]:
        """Every file under the repository, relative to it."""
        return {
            p.relative_to(self.repository).as_posix()
            for p in self.repository.rglob("*")
            if p.is_file()
        }
