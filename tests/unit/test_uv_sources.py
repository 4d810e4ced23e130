"""``scripts/uv_sources.py``: pip's package sources as ``uv pip install`` options, on listings
in the format ``pip config list`` prints (one read from this machine's pip too)."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import uv_sources

LISTING = """\
:env:.default-timeout='180'
:env:.find-links='/opt/wheels'
global.cert='/etc/ssl/certs/ca-certificates.crt'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/elsewhere'
"""


def test_each_source_becomes_the_uv_option_of_the_same_meaning():
    options = uv_sources.uv_options(uv_sources.parse(LISTING))
    assert options[:2] == ["--index-strategy", "unsafe-best-match"]
    pairs = list(itertools.pairwise(options))
    assert ("--extra-index-url", "file:///opt/pypi/simple") in pairs
    assert ("--extra-index-url", "file:///opt/pypi-more/simple") in pairs
    assert ("--constraint", "/etc/xdg/pip/constraints.txt") in pairs
    assert "--native-tls" in options
    # the environment's find-links wins over the file's, as in pip
    assert ("--find-links", "/opt/wheels") in pairs
    assert "/elsewhere" not in options


def test_index_url_and_no_index_are_passed_on():
    settings = uv_sources.parse(
        "global.index-url='https://mirror.example/simple'\nglobal.no-index='true'\n"
    )
    options = uv_sources.uv_options(settings)
    assert options[options.index("--index-url") + 1] == "https://mirror.example/simple"
    assert "--no-index" in options


@pytest.mark.parametrize("setting", ["trusted-host", "proxy", "client-cert"])
def test_a_setting_uv_cannot_take_falls_back_to_pip(setting):
    with pytest.raises(uv_sources.Unsupported, match=setting):
        uv_sources.uv_options(uv_sources.parse(f"global.{setting}='x'\n"))


def test_this_machines_pip_settings_are_read_or_refused_with_exit_3():
    script = Path(uv_sources.__file__)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert done.returncode in (0, 3), done.stderr
    if done.returncode == 0:
        assert done.stdout.startswith("--index-strategy unsafe-best-match")
    else:
        assert "has no uv equivalent" in done.stderr
