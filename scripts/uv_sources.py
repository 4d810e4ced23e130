"""Where pip is configured to find packages, as options for ``uv pip install`` (``make setup``).

uv does not read pip's configuration files or its ``PIP_*`` variables, so ``make setup`` passes
it what ``pip config list`` reports (pip's own merged view of its files and environment):
``index-url``, ``extra-index-url``, ``find-links``, ``constraint`` and ``no-index`` become
uv's options of the same meaning, ``cert`` becomes ``--native-tls`` (the system's certificate
store), and ``--index-strategy unsafe-best-match`` keeps pip's rule (the best version from any
index). Settings that change nothing about where packages come from (timeouts, the version
check, progress bars) are ignored.

Usage::

    python3 scripts/uv_sources.py     # prints the options on one line; exit 0
                                      # exit 3: a setting uv cannot be given; use pip

Exit status 3 names the setting on stderr (``trusted-host``, ``proxy``...), and ``make setup``
installs with pip instead; it does so too when uv fails, so an install that pip's settings make
work is not broken by uv.
Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

# pip setting -> uv option, for the settings that say where packages come from.
LISTS = {"extra-index-url": "--extra-index-url", "find-links": "--find-links"}
SINGLE = {"index-url": "--index-url", "constraint": "--constraint"}
# Settings with no effect on which files are installed.
IGNORED = {
    "default-timeout", "timeout", "disable-pip-version-check", "progress-bar", "no-color",
    "retries", "quiet", "verbose", "no-cache-dir", "cache-dir", "root-user-action",
    "break-system-packages", "no-input", "no-compile", "compile",
}  # fmt: skip
ENTRY = re.compile(r"^(?P<section>[^.=]*)\.(?P<key>[a-z0-9-]+)=(?P<value>.*)$")


class Unsupported(ValueError):
    """A pip setting that uv cannot be given the same meaning of."""


def parse(listing: str) -> dict[str, str]:
    """``pip config list`` output -> ``{setting: value}``; a later line wins (pip lists the
    environment's ``:env:`` entries first, files after; for a setting in both, pip uses the
    environment's, so those are read last here)."""
    files, env = {}, {}
    for line in listing.splitlines():
        match = ENTRY.match(line.strip())
        if not match:
            continue
        section, key = match["section"], match["key"]
        if section not in (":env:", "global", "install"):
            continue
        value = match["value"]
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        (env if section == ":env:" else files)[key] = value
    return files | env


def uv_options(settings: dict[str, str]) -> list[str]:
    """uv options with the meaning of pip's ``settings``.

    Raises:
        Unsupported: a setting outside the ones named in the module docstring.
    """
    options = ["--index-strategy", "unsafe-best-match"]
    for key, value in sorted(settings.items()):
        if key in IGNORED:
            continue
        if key in LISTS:
            for item in value.split():
                options += [LISTS[key], item]
        elif key == "no-index":
            if value.lower() in ("1", "true", "yes", "on"):
                options.append("--no-index")
        elif key in SINGLE:
            options += [SINGLE[key], value]
        elif key == "cert":  # uv reads the system's certificate store instead of its own
            options.append("--native-tls")
        else:
            raise Unsupported(key)
    return options


def main() -> int:
    listing = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    try:
        options = uv_options(parse(listing))
    except Unsupported as exc:
        print(f"uv_sources: pip's setting {exc} has no uv equivalent here", file=sys.stderr)
        return 3
    print(shlex.join(options))
    return 0


if __name__ == "__main__":
    sys.exit(main())
