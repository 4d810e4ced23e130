"""The stubs' numpy check without a subprocess: which versions the 2.51 stubs take, the pin read
from requirements.txt, and the message for each answer of the probe
(:mod:`tritonrepo.server.stub_numpy`; the probe itself runs in tests/server/test_numpy_refusal.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tritonrepo.server.stub_numpy import StubNumpy, pinned_numpy, problem, supported


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("1.26.4", True),
        ("1.21.6", True),
        ("1.26.5.dev0", True),  # a 1.x development build
        ("1.26.4+local", True),
        ("1.99", True),
        ("2.0.0rc1", False),  # 2.0's pre-releases have numpy 2's ABI
        ("2.0.0b1", False),
        ("2.0.0", False),
        ("2", False),
        ("2.2.6", False),
        ("3.0.0", False),
    ],
)
def test_which_numpy_the_stubs_take(version: str, expected: bool):
    assert supported(version) is expected


def test_the_pin_is_the_first_numpy_line_whose_marker_holds(tmp_path: Path):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(
        "# numpy==0.1 in a comment\n"
        "tritonclient[all]==2.51.0\n"
        "-r other.txt\n"
        'numpy==9.9.9; python_version < "3"\n'
        "numpy==1.26.4                 # the 2.51 Python backend returns empty outputs\n"
        "numpy==1.25.0\n"
    )
    assert pinned_numpy(requirements) == "numpy==1.26.4"


def test_without_a_pin_the_requirement_is_numpy_below_2(tmp_path: Path):
    assert pinned_numpy(tmp_path / "missing.txt") == "numpy<2"
    (tmp_path / "requirements.txt").write_text("onnx==1.22.0\n")
    assert pinned_numpy(tmp_path / "requirements.txt") == "numpy<2"


@pytest.fixture
def environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A checkout-like folder, the current one, with ``.venv/bin/python3`` and its ``pip``."""
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "pip").touch()
    monkeypatch.chdir(tmp_path)
    return bin_dir / "python3"


def test_numpy_2_names_the_pip_commands(environment: Path):
    site = environment.parents[1] / "lib" / "python3.11" / "site-packages" / "numpy"
    found = StubNumpy(environment, "3.11", version="2.1.3", location=site)
    message = problem(found, "numpy==1.26.4", launcher_python="3.11")
    assert message == (
        f"the Python-backend stubs would import numpy 2.1.3 ({site}, the environment of "
        ".venv/bin/python3), and tritonserver 2.51's stubs need numpy<2: with numpy 2 every "
        'Python step answers empty or wrong tensors ("input byte size mismatch ... got 0"); '
        'put the pinned one back: .venv/bin/pip install "numpy==1.26.4"; install a '
        "pipeline's packages without moving the pins: sed -E 's/\\[[^]]*\\]//' requirements.txt"
        " | .venv/bin/pip install -c /dev/stdin PACKAGE ... (docs/models/add_your_own_model.md)"
    )


def test_numpy_1_passes(environment: Path):
    found = StubNumpy(environment, "3.11", version="1.26.4", location=Path("/x/numpy"))
    assert problem(found, "numpy==1.26.4", launcher_python="3.11") is None


def test_no_numpy_at_all(environment: Path):
    found = StubNumpy(environment, "3.11", error="ModuleNotFoundError: No module named 'numpy'")
    assert problem(found, "numpy==1.26.4", launcher_python="3.11") == (
        "the Python-backend stubs cannot import numpy (ModuleNotFoundError: No module named "
        "'numpy'; Python .venv/bin/python3); install it: .venv/bin/pip install \"numpy==1.26.4\""
    )


def test_a_stub_python_of_another_version(tmp_path: Path):
    python = tmp_path / "bin" / "python3"
    found = StubNumpy(python, "3.12", version="1.26.4", location=Path("/x/numpy"))
    assert problem(found, "numpy==1.26.4", launcher_python="3.11") == (
        f"the stubs' Python {python} (TRITONREPO_STUB_PYTHON) is Python 3.12, but the stubs run "
        "Python 3.11, the launcher's; point TRITONREPO_STUB_PYTHON at a Python 3.11 environment"
    )
