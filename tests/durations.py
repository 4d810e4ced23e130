"""Per-suite time table of a test run, from pytest's JUnit XML (``--junitxml``): seconds per
folder of ``tests/`` and the slowest files. With pytest-xdist the files run on several workers,
so the sums are worker-seconds, not wall time; then the files that cost the most CPU seconds
(``tests/cpu_seconds.py``), when the run wrote them. ``python -m tests.durations build/junit.xml``.

``--save`` also writes each file's seconds to ``tests/data/file_seconds.json``, the order
``make test`` hands the files to its workers in (longest first: ``tests/conftest.py``)."""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

from tests import cpu_seconds


def file_seconds(junit: Path) -> Counter[str]:
    """Seconds per test file (setup, call and teardown of its tests) in ``junit``."""
    per_file: Counter[str] = Counter()
    for case in ET.parse(junit).iter("testcase"):
        module = case.get("classname", "").split("::")[0]
        parts = module.split(".")
        # classname is "tests.server.test_x" or "tests.server.test_x.TestClass"
        depth = next((i for i, p in enumerate(parts) if p.startswith("test_")), len(parts) - 1)
        per_file["/".join(parts[: depth + 1]) + ".py"] += float(case.get("time") or 0.0)
    return per_file


FILE_SECONDS = Path(__file__).parent / "data" / "file_seconds.json"


def save(per_file: Counter[str], path: Path = FILE_SECONDS) -> None:
    """Write ``{file: seconds}`` (to 0.1 s), longest first, to ``path``."""
    ordered = {name: round(seconds, 1) for name, seconds in per_file.most_common()}
    path.write_text(json.dumps(ordered, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    """Print the table (``--save``: and write :data:`FILE_SECONDS`); exit 1 when the file is
    missing or unreadable."""
    args = sys.argv[1:] if argv is None else argv
    saving = "--save" in args
    args = [a for a in args if a != "--save"]
    junit = Path(args[0] if args else "build/junit.xml")
    try:
        per_file = file_seconds(junit)
    except (OSError, ET.ParseError) as exc:
        print(f"no durations: {junit}: {exc}")
        return 1
    per_folder: Counter[str] = Counter()
    for name, seconds in per_file.items():
        per_folder[name.rsplit("/", 1)[0]] += seconds
    print(f"| suite | seconds (worker-seconds, {sum(per_file.values()):.0f} in all) |")
    print("|---|---|")
    for folder, seconds in per_folder.most_common():
        print(f"| {folder} | {seconds:.0f} |")
    print("\n| slowest files | seconds |\n|---|---|")
    for name, seconds in per_file.most_common(15):
        print(f"| {name} | {seconds:.0f} |")
    cpu = cpu_seconds.read_all()
    if cpu:
        print(f"\n| costliest files (tests/cpu_seconds.py) | CPU seconds ({sum(cpu.values()):.0f} "
              "in all) |\n|---|---|")  # fmt: skip
        for name, seconds in cpu.most_common(20):
            print(f"| {name} | {seconds:.0f} |")
    if saving:
        save(per_file)
        print(f"\n{len(per_file)} files' seconds written to {FILE_SECONDS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
