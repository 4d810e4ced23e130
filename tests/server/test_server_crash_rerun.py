"""The rerun of a test whose server died (``tests/server_crashes.py``), run as an inner pytest
session with this suite's hooks against a real tritonserver that the inner tests crash with
SIGSEGV (Triton's own handler prints ``Signal (11) received.`` and the backtrace): a test whose
server died once passes on the restarted server (also one it fetched at run time and named with
``server_crashes.watch``), a failure without a death is not rerun, and a server that dies on
every run fails its test.
"""

from __future__ import annotations

import pytest

from tritonrepo.paths import REPO_ROOT

pytestmark = pytest.mark.server
pytest_plugins = ["pytester"]

INNER_CONFTEST = """
from tests.conftest import (  # noqa: F401  (the hooks under test)
    pytest_collection_modifyitems,
    pytest_runtest_makereport,
    pytest_terminal_summary,
)
"""

INNER_TESTS = """
import os
import signal

import pytest

from tests import server_crashes
from tests.conftest import server_options
from tritonrepo.server.launcher import TritonServer

pytestmark = pytest.mark.server


@pytest.fixture(scope="module")
def server():
    with TritonServer(server_options("crash-rerun", models=("click_lightgbm",))) as s:
        yield s


def crash(server):
    os.kill(server.process.pid, signal.SIGSEGV)
    server.process.wait(timeout=30)


def test_dies_once(server, request):
    if request.node.execution_count == 1:
        crash(server)
    assert "click_lightgbm" in server.ready_models()


def test_dies_once_under_a_server_fetched_at_run_time(request):
    fetched = request.getfixturevalue("server")
    server_crashes.watch(request.node, fetched)
    if request.node.execution_count == 1:
        crash(fetched)
    assert "click_lightgbm" in fetched.ready_models()


def test_fails_without_a_death(server):
    assert "no such model" in server.ready_models()


def test_dies_every_time(server):
    crash(server)
    server.ready_models()
"""


def test_a_test_whose_server_died_runs_again_on_the_server_started_again(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    pytester.makeini("[pytest]\nmarkers =\n    server: a real tritonserver\n")
    pytester.makeconftest(INNER_CONFTEST)
    pytester.makepyfile(test_inner=INNER_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    outcomes = result.parseoutcomes()
    assert {k: outcomes.get(k) for k in ("passed", "failed", "rerun")} == {
        "passed": 2,
        "failed": 2,
        "rerun": 3,
    }, result.stdout.str()
    out = result.stdout.str()
    assert "tests rerun after their tritonserver died" in out
    died = [line for line in result.stdout.lines if line.startswith("test_inner.py::")]
    assert {line.split(":")[2] for line in died} == {
        "test_dies_once",
        "test_dies_once_under_a_server_fetched_at_run_time",
        "test_dies_every_time",
    }
    assert "Signal (11) received" in out
    assert "FAILED test_inner.py::test_fails_without_a_death" in out
