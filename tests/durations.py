"""Per-suite time table of a test run, from pytest's JUnit XML (``--junitxml``): seconds per
folder of ``tests/`` and the slowest files. With pytest-xdist the files run on two workers, so
the sums are worker-seconds, not wall time. ``python -m tests.durations build/junit.xml``."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path


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


def main(argv: list[str] | None = None) -> int:
    """Print the table; exit 1 when the file is missing or unreadable."""
    args = sys.argv[1:] if argv is None else argv
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
