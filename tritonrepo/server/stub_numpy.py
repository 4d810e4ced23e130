"""The numpy that the Python-backend stubs of the embedded ``tritonserver`` 2.51 will import.

The 2.51 stub (``triton_python_backend_stub`` of ``nvidia-pytriton==0.7.0``; python_backend
``r24.10`` builds pybind11 2.10, which has no numpy 2 support) reads and writes tensors wrong
with numpy 2: a step's outputs arrive empty (``input byte size mismatch for input 'features'
for model '...'. Expected 120, got 0``) or wrong (FP32 ``[0.5, 1.5, 2.5, 3.5]`` as four
``0.5``). Installing a package that needs numpy 2 into the environment upgrades it silently.

:func:`probe` asks the stubs' own interpreter which numpy it imports, started as a stub
starts it (observed on 2.51 with a model that records ``sys.flags`` and ``sys.path``): the
embedded interpreter runs **isolated** (``sys.flags.isolated``: ``PYTHONPATH`` and the user's
site-packages are ignored), its environment is that of the first ``python3`` on the server's
``PATH`` (:func:`tritonrepo.server.embedded_server.server_environment` puts the ``bin/`` of
``TRITONREPO_STUB_PYTHON``, default this interpreter, first), and ``sys.path`` starts with the
server's current folder (``""``), then the standard library and that environment's
site-packages. So numpy 2 reaches the stubs when a ``pip install`` upgraded it in that
environment, not through ``PYTHONPATH``. :func:`check` turns the answer into a
:class:`~tritonrepo.server.artifact_checks.Finding` that says what is wrong and the command
that fixes it. The launcher (:func:`tritonrepo.server.command.preflight`),
``tritonrepo-preflight``, ``tritonrepo-new`` and ``python -m builders.pipeline.build`` refuse
to go on when it is an error. One probe costs about 0.1 s (one ``python3 -I -c "import numpy"``).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tritonrepo.paths import REPO_ROOT
from tritonrepo.server.artifact_checks import Finding
from tritonrepo.server.embedded_server import (
    STUB_PYTHON_ENV,
    LaunchError,
    server_environment,
    stub_python,
)

# What the 2.51 stubs read correctly: numpy 1.x, as a PEP 440 specifier. "<2" also refuses 2.0's
# pre-releases (PEP 440: an exclusive "<V" admits no pre-release of V), which have numpy 2's
# ABI. python_backend builds pybind11 2.12 (numpy 2 support) from 24.11 on (known_issues.md).
STUB_NUMPY = "<2"
REQUIREMENTS = REPO_ROOT / "requirements.txt"
LABEL = "numpy"  # the Finding's "model" field: the check is about the whole server
# pip refuses a constraints file with extras ("Constraints cannot have extras"), and
# requirements.txt has some (tritonclient[all]); the same sed as docker/Dockerfile drops them.
STRIP_EXTRAS = "sed -E 's/\\[[^]]*\\]//' requirements.txt"
GUIDE = "docs/models/add_your_own_model.md"
PROBE_TIMEOUT_S = 60.0  # a first import after an install compiles numpy's .pyc files
# Run with -I (isolated, as the stub); the stub's sys.path also starts with "" (its folder).
_PROBE = """\
import json, sys
sys.path.insert(0, "")
found = {"python": "%d.%d" % sys.version_info[:2]}
try:
    import numpy
    found.update(version=numpy.__version__, file=numpy.__file__)
except Exception as exc:
    found["error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(found))
"""


@dataclass(frozen=True)
class StubNumpy:
    """What the stubs' interpreter imports.

    Attributes:
        python: the interpreter asked (:func:`stub_interpreter`).
        python_version: its ``major.minor``.
        version: ``numpy.__version__``; None when ``import numpy`` failed.
        location: the numpy package's folder; None when the import failed.
        error: ``"<ExceptionType>: <message>"`` of a failed import, else None.
    """

    python: Path
    python_version: str
    version: str | None = None
    location: Path | None = None
    error: str | None = None


def stub_interpreter(environment: Mapping[str, str]) -> Path:
    """The interpreter whose environment the stubs' embedded Python takes: the first
    ``python3`` on ``environment``'s ``PATH`` (it looks itself up there), else
    :func:`stub_python`."""
    found = shutil.which("python3", path=environment.get("PATH", ""))
    return Path(found) if found else stub_python()


def probe(environment: Mapping[str, str], python: Path) -> StubNumpy:
    """Run ``python -I -c "import numpy"`` with ``environment`` (the server's), from the current
    folder (the server's), with ``""`` first on ``sys.path``: the numpy a stub would import.

    Raises:
        LaunchError: ``python`` cannot be run or prints no answer within
            :data:`PROBE_TIMEOUT_S` seconds.
    """
    try:
        out = subprocess.run(
            [str(python), "-I", "-c", _PROBE],
            env=dict(environment),
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
        )
        found = json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as exc:
        raise LaunchError(f"the stubs' Python {python} cannot be run: {exc}") from None
    return StubNumpy(
        python=python,
        python_version=found["python"],
        version=found.get("version"),
        location=Path(found["file"]).parent if "file" in found else None,
        error=found.get("error"),
    )


def supported(version: str) -> bool:
    """Whether the 2.51 stubs read tensors correctly with numpy ``version`` (in
    :data:`STUB_NUMPY`; pre-releases and local versions of 1.x included).

    Raises:
        packaging.version.InvalidVersion: ``version`` is not a PEP 440 version.
    """
    from packaging.specifiers import SpecifierSet  # here: where check() skips, nothing needs it

    return SpecifierSet(STUB_NUMPY).contains(version, prereleases=True)


def pinned_numpy(requirements: Path = REQUIREMENTS) -> str:
    """The numpy requirement ``requirements`` pins for this Python (``numpy==1.26.4``: the
    first ``numpy`` line whose environment marker holds), or ``numpy<2`` when it has none
    (a copy of the repository without requirements.txt)."""
    from packaging.requirements import InvalidRequirement, Requirement

    if requirements.is_file():
        for line in requirements.read_text().splitlines():
            text = line.split("#", 1)[0].strip()
            if not text or text.startswith("-"):
                continue
            try:
                req = Requirement(text)
            except InvalidRequirement:
                continue
            if req.name.lower() == "numpy" and (req.marker is None or req.marker.evaluate()):
                return f"numpy{req.specifier}"
    return f"numpy{STUB_NUMPY}"


def _shown(path: Path) -> str:
    """A command's path relative to the current folder when under it (``.venv/bin/pip``)."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def problem(found: StubNumpy, pinned: str, launcher_python: str | None = None) -> str | None:
    """What is wrong with ``found`` and the command that fixes it, or None when the stubs can
    serve with it.

    Args:
        found: the :func:`probe` answer.
        pinned: the requirement to install (:func:`pinned_numpy`).
        launcher_python: ``major.minor`` of the Python the stub was chosen for (default: this
            one); the stub's embedded interpreter is that version, so ``found.python_version``
            must equal it.
    """
    launcher_python = launcher_python or f"{sys.version_info.major}.{sys.version_info.minor}"
    python = _shown(found.python)
    if found.python_version != launcher_python:
        return (
            f"the stubs' Python {python} ({STUB_PYTHON_ENV}) is Python {found.python_version}, "
            f"but the stubs run Python {launcher_python}, the launcher's; point "
            f"{STUB_PYTHON_ENV} at a Python {launcher_python} environment"
        )
    pip_next_to_it = found.python.parent / "pip"
    pip = _shown(pip_next_to_it) if pip_next_to_it.exists() else f"{python} -m pip"
    install = f'{pip} install "{pinned}"'
    if found.version is None:
        return (
            f"the Python-backend stubs cannot import numpy ({found.error}; Python {python}); "
            f"install it: {install}"
        )
    if supported(found.version):
        return None
    return (
        f"the Python-backend stubs would import numpy {found.version} ({found.location}, the "
        f"environment of {python}), and tritonserver 2.51's stubs need numpy{STUB_NUMPY}: with "
        'numpy 2 every Python step answers empty or wrong tensors ("input byte size mismatch '
        f"... got 0\"); put the pinned one back: {install}; install a pipeline's packages "
        f"without moving the pins: {STRIP_EXTRAS} | {pip} install -c /dev/stdin PACKAGE ... "
        f"({GUIDE})"
    )


def check(environment: Mapping[str, str] | None = None) -> Finding:
    """The stubs' numpy as a finding, with the environment the launcher gives the server
    (default: built from this process's, :func:`server_environment`): ``error`` (message
    from :func:`problem`), ``ok`` (the version and where it comes from), or ``skipped`` when
    no embedded server is installed here (the NGC container's Triton reads numpy 2)."""
    if importlib.util.find_spec("pytriton") is None:
        return Finding("skipped", LABEL, "no embedded tritonserver 2.51 (nvidia-pytriton) here")
    try:
        env = dict(environment) if environment is not None else server_environment()
        found = probe(env, stub_interpreter(env))
    except LaunchError as exc:
        return Finding("error", LABEL, str(exc))
    message = problem(found, pinned_numpy())
    if message:
        return Finding("error", LABEL, message)
    return Finding(
        "ok", LABEL, f"the Python-backend stubs import numpy {found.version} ({found.location})"
    )


def refusal(what: str) -> str | None:
    """For a command that prepares models for this server (``tritonrepo-new``, the pipeline
    build): ``"<what>, the models would not serve: <the problem and its fix>"`` when
    :func:`check` is an error, else None (``what``: ``nothing generated``)."""
    finding = check()
    if finding.level != "error":
        return None
    return f"{what}, the models would not serve: {finding.message}"
