"""numpy 2 in the environment the Python-backend stubs import from: the launcher,
``tritonrepo-preflight``, ``tritonrepo-new`` and the pipeline build refuse, naming the numpy,
where it comes from and the fix, before any server starts.

numpy 2 is made really importable there, as a user's ``pip install`` does it: numpy
:data:`NUMPY_2` is installed once with pip into ``build/test-cache/`` (pip's own cache keeps
the wheel too) and linked into the site-packages of a virtual environment that
``TRITONREPO_STUB_PYTHON`` names (the stubs' interpreter runs isolated and ignores
``PYTHONPATH``: :mod:`tritonrepo.server.stub_numpy`). No server is started: every refusal
comes before.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from importlib.metadata import version
from pathlib import Path

import pytest

from builders.pipeline import build, generate
from tests.conftest import free_ports, server_options
from tritonrepo.paths import BUILD_DIR, REPO_ROOT
from tritonrepo.server import preflight
from tritonrepo.server.embedded_server import STUB_PYTHON_ENV
from tritonrepo.server.launcher import LaunchError, TritonServer

NUMPY_2 = "2.2.6"  # wheels for CPython 3.10 to 3.13
PINNED = next(  # read from the file, not from the code under test
    line.split("#")[0].strip()
    for line in (REPO_ROOT / "requirements.txt").read_text().splitlines()
    if line.startswith("numpy==")
)


@pytest.fixture(scope="module")
def numpy_2() -> Path:
    """A folder holding numpy :data:`NUMPY_2` alone (``pip install --target``), made once per
    Python version and kept in ``build/test-cache/``."""
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    folder = BUILD_DIR / "test-cache" / f"numpy-{NUMPY_2}-{tag}"
    if not (folder / "numpy" / "__init__.py").is_file():
        staging = folder.with_name(f"{folder.name}.tmp{os.getpid()}")
        out = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             "--no-deps", "--only-binary=:all:", "--target", str(staging), f"numpy=={NUMPY_2}"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        if out.returncode != 0:
            pytest.fail(f"pip could not install numpy {NUMPY_2}: {out.stderr.strip()[-300:]}")
        staging.replace(folder)
    return folder


@pytest.fixture(scope="module")
def stubs_env(numpy_2: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtual environment of this Python whose site-packages hold numpy 2 (linked from the
    cache), as after a ``pip install`` upgraded it there; its ``bin/python3``."""
    env_dir = tmp_path_factory.mktemp("stubs") / "venv"
    venv.EnvBuilder(with_pip=False, symlinks=True).create(env_dir)
    python_version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = env_dir / "lib" / python_version / "site-packages"
    for entry in numpy_2.iterdir():
        (site / entry.name).symlink_to(entry)
    return env_dir / "bin" / "python3"


def expected_start(python: Path) -> str:
    site = python.parents[1] / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    return (
        f"the Python-backend stubs would import numpy {NUMPY_2} ({site / 'site-packages' / 'numpy'}"
        f", the environment of {python}), and tritonserver 2.51's stubs need numpy<2: with "
        "numpy 2 every Python step answers empty or wrong tensors"
    )


def expected_fix(python: Path) -> str:
    return (
        f'put the pinned one back: {python} -m pip install "{PINNED}"; install a pipeline\'s '
        "packages without moving the pins: sed -E 's/\\[[^]]*\\]//' requirements.txt | "
        f"{python} -m pip install -c /dev/stdin PACKAGE ... (docs/models/add_your_own_model.md)"
    )


def test_serve_refuses_numpy_2_and_names_the_fix(stubs_env: Path):
    env = {**os.environ, STUB_PYTHON_ENV: str(stubs_env.parent / "python")}
    ports = [str(p) for p in free_ports(3)]
    out = subprocess.run(
        [sys.executable, "-m", "tritonrepo.server.serve", "--no-repository-key",
         "--http-port", ports[0], "--grpc-port", ports[1], "--metrics-port", ports[2]],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert out.returncode == 1, out.stdout + out.stderr
    assert out.stderr.count("\n") == 1, out.stderr  # one line
    error = out.stderr.strip()
    assert error.startswith(f"error: preflight: {expected_start(stubs_env)}"), error
    assert error.endswith(expected_fix(stubs_env)), error
    assert "ready:" not in out.stdout


def test_launcher_starts_no_process(stubs_env: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(STUB_PYTHON_ENV, str(stubs_env.parent / "python"))
    server = TritonServer(server_options("numpy-refusal"))
    with pytest.raises(LaunchError, match="stubs would import numpy 2"):
        server.start()
    assert server.process is None


def test_preflight_reports_the_stubs_numpy(stubs_env: Path, numpy_2: Path, tmp_path, monkeypatch,
                                           capsys):  # fmt: skip
    argv = ["--repository", str(tmp_path)]  # an empty repository: only numpy matters here
    monkeypatch.delenv(STUB_PYTHON_ENV, raising=False)
    # numpy 2 on PYTHONPATH does not reach the stubs (observed: they run isolated)
    monkeypatch.setenv("PYTHONPATH", str(numpy_2))
    preflight.main(argv)
    first = capsys.readouterr().out.splitlines()[0]
    # this environment's numpy (make setup's), as pip's metadata says
    assert first.startswith(
        f"ok      numpy: the Python-backend stubs import numpy {version('numpy')}"
    )

    monkeypatch.setenv(STUB_PYTHON_ENV, str(stubs_env))
    assert preflight.main(argv) == 1
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"error   numpy: {expected_start(stubs_env)}"), first
    assert first.endswith(expected_fix(stubs_env)), first


def test_generator_and_build_refuse_and_write_nothing(stubs_env: Path, tmp_path, monkeypatch,
                                                      capsys):  # fmt: skip
    monkeypatch.setenv(STUB_PYTHON_ENV, str(stubs_env))
    monkeypatch.setattr(sys, "path", list(sys.path))  # main() prepends the checkout
    repository = tmp_path / "model_repository"
    repository.mkdir()
    # --check: even without the refusal the generator would write nothing
    argv = ["pipeline", "breast_cancer", "--repository", str(repository), "--check"]
    assert generate.main(argv) == 1
    error = capsys.readouterr().err
    start = f"error: nothing generated, the models would not serve: {expected_start(stubs_env)}"
    assert error.startswith(start), error
    assert error.strip().endswith(expected_fix(stubs_env)), error

    assert build.main(["breast_cancer", "--repository", str(repository)]) == 1
    error = capsys.readouterr().err
    start = f"error: nothing built, the models would not serve: {expected_start(stubs_env)}"
    assert error.startswith(start), error
    assert list(repository.iterdir()) == []
