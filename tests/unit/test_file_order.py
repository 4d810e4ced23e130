"""The order ``make test`` hands files to its workers in (``tests.conftest.file_order``): longest
first by the seconds of an earlier run (``tests/data/file_seconds.json``, written from a JUnit
file by ``python -m tests.durations --save``), a file not measured yet as long as its folder's
longest; and the shipped measurements cover the test files."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from tests import durations
from tests.conftest import file_order
from tritonrepo.paths import REPO_ROOT

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.server.test_slow" name="test_a" time="120.5"/>
<testcase classname="tests.server.test_slow" name="test_b" time="30.0"/>
<testcase classname="tests.server.test_quick.TestGroup" name="test_c" time="12.0"/>
<testcase classname="tests.unit.test_logic" name="test_d" time="0.4"/>
</testsuite></testsuites>
"""


def test_files_are_ordered_longest_first_and_new_ones_as_their_folders_longest() -> None:
    seconds = {"tests/server/test_slow.py": 150.5, "tests/server/test_quick.py": 12.0,
               "tests/unit/test_logic.py": 0.4}  # fmt: skip
    files = ["tests/unit/test_logic.py", "tests/unit/test_new.py", "tests/server/test_quick.py",
             "tests/server/test_new.py", "tests/server/test_slow.py"]  # fmt: skip
    assert file_order(seconds, files) == [
        "tests/server/test_new.py",  # unmeasured: as long as test_slow, and first of the two
        "tests/server/test_slow.py",
        "tests/server/test_quick.py",
        "tests/unit/test_logic.py",
        "tests/unit/test_new.py",
    ]
    assert file_order({}, files) == files  # nothing measured: the collection order


def test_save_writes_each_files_seconds_longest_first(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT)
    per_file = durations.file_seconds(junit)
    assert per_file == Counter({"tests/server/test_slow.py": 150.5,
                                "tests/server/test_quick.py": 12.0,
                                "tests/unit/test_logic.py": 0.4})  # fmt: skip
    out = tmp_path / "file_seconds.json"
    durations.save(per_file, out)
    assert list(json.loads(out.read_text()).items()) == [
        ("tests/server/test_slow.py", 150.5),
        ("tests/server/test_quick.py", 12.0),
        ("tests/unit/test_logic.py", 0.4),
    ]


def test_the_shipped_seconds_name_existing_test_files() -> None:
    """Every file in tests/data/file_seconds.json exists (a renamed file would keep a stale
    entry), and the server files, which decide the run's length, are all measured."""
    seconds = json.loads(durations.FILE_SECONDS.read_text())
    missing = [name for name in seconds if not (REPO_ROOT / name).is_file()]
    assert not missing, f"run python -m tests.durations build/junit.xml --save: {missing}"
    server = {p.relative_to(REPO_ROOT).as_posix() for p in REPO_ROOT.glob("tests/server/test_*.py")}
    assert server <= set(seconds), sorted(server - set(seconds))
