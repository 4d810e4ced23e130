"""The command blocks of the Markdown docs, as tests: parsing and output comparison.

``tests/server/test_docs_blocks.py`` runs what this module finds; the conventions are those of
``docs/contributing/doc_blocks.md``:

- fenced blocks tagged ``bash`` (or ``sh``, ``shell``), ``console`` or ``python`` run; every
  other block (untagged, ``text``, ``yaml``, ...) is shown, not run;
- in a ``console`` block, lines starting with ``$ `` are commands (a line ending in ``\\``
  continues on the next) and the lines up to the next ``$ `` are that command's shown output;
- a ``text`` (or ``output``) block right after a ``bash`` or ``python`` block is its shown
  output;
- an HTML comment right above a block, ``<!-- doc-test: ITEM; ITEM -->``, says how to run it:
  ``skip (reason)``, ``output-approx``, ``files NAME ...``, ``timeout SECONDS``,
  ``own-server MODEL``.

Shown output is compared line by line (trailing spaces ignored): ``...`` matches any text
within a line, a line that is only ``...`` matches any number of lines, and numbers match
when they agree to the precision shown (see :func:`compare_output`).

Markdown is parsed with markdown-it-py (CommonMark), so fences inside list items, ``~~~``
fences and longer backtick fences are found as GitHub renders them.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path

from markdown_it import MarkdownIt

RUN_LANGUAGES = {
    "bash": "bash",
    "sh": "bash",
    "shell": "bash",
    "console": "console",
    "python": "python",
}
OUTPUT_LANGUAGES = ("text", "output")
MARKER = re.compile(r"<!--\s*doc-test:(?P<body>.*?)-->", re.DOTALL)
DEFAULT_TIMEOUT_S = 300.0


class DocBlockError(ValueError):
    """A doc block or marker that breaks the conventions; the message starts with
    ``FILE:LINE:``."""


@dataclass
class Command:
    """One ``$ `` command of a console block: the shell text (continuations joined), the
    output shown under it (None when nothing is shown) and the 1-based line of its ``$ ``."""

    text: str
    shown: str | None
    line: int


@dataclass
class Block:
    """A fenced block that runs.

    Attributes:
        path: the Markdown file, as given to :func:`parse_file`.
        line: 1-based line of the opening fence.
        kind: ``"bash"``, ``"console"`` or ``"python"``.
        source: the block's text (list indentation removed).
        shown: the output block that follows it (bash/python), or None.
        skip: the reason given by a ``skip`` marker, or None.
        approx: ``output-approx``: numbers with a fraction part may differ.
        files: input files the block expects in its working directory (``files`` marker).
        timeout_s: seconds the block may run (``timeout`` marker; default 300).
        own_server: ``own-server MODEL``: the block runs after every shared-server block, on a
            server of its own serving MODEL from copies of its pipeline's model folders
            (``MODEL*``), shared with the blocks after it on the same page that name the same
            model; None: the shared server.
        problem: what breaks the conventions (the block then fails with it), or None.
    """

    path: Path
    line: int
    kind: str
    source: str
    shown: str | None = None
    skip: str | None = None
    approx: bool = False
    files: list[str] = field(default_factory=list)
    timeout_s: float = DEFAULT_TIMEOUT_S
    own_server: str | None = None
    problem: str | None = None

    @property
    def where(self) -> str:
        """``FILE:LINE`` of the opening fence."""
        return f"{self.path}:{self.line}"

    def commands(self) -> list[Command]:
        """The console block's commands (:func:`console_commands`)."""
        return console_commands(self.source, self.line + 1, self.where)


def split_items(body: str) -> list[str]:
    """``a; skip (x; y); b`` → ``["a", "skip (x; y)", "b"]``: ``;`` inside parentheses belongs
    to the item."""
    items, depth, current = [], 0, []
    for char in body:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == ";" and depth <= 0:
            items.append("".join(current))
            current = []
        else:
            current.append(char)
    return [*items, "".join(current)]


def parse_marker(body: str, where: str) -> dict:
    """The items of one ``<!-- doc-test: ... -->`` comment (``body`` is the text after
    ``doc-test:``) → ``{"skip": reason, "approx": bool, "files": [...], "timeout_s": s,
    "own_server": MODEL}``.

    Raises:
        DocBlockError: an unknown item, ``skip`` without a reason, a bad timeout.
    """
    found: dict = {}
    for raw in split_items(body):
        item = raw.strip()
        if not item:
            continue
        word, _, rest = item.partition(" ")
        rest = rest.strip()
        if word in ("skip", "skip:") or item.startswith(("skip(", "skip:")):
            reason = item[4:].strip().lstrip(":").strip()
            if reason.startswith("(") and reason.endswith(")"):
                reason = reason[1:-1].strip()
            if not reason:
                raise DocBlockError(
                    f"{where}: 'skip' needs a reason: <!-- doc-test: skip (why) -->"
                )
            found["skip"] = reason
        elif item == "server":
            found["server"] = True  # every block runs with the server; the item says it reads it
        elif item == "output-approx":
            found["approx"] = True
        elif word == "files" and rest:
            found["files"] = rest.split()
        elif word == "own-server" and len(rest.split()) == 1:
            found["own_server"] = rest
        elif word == "timeout":
            try:
                found["timeout_s"] = float(rest)
            except ValueError:
                raise DocBlockError(f"{where}: timeout needs seconds, got {rest!r}") from None
        else:
            raise DocBlockError(
                f"{where}: unknown doc-test item {item!r} (known: skip (reason), output-approx, "
                "files NAME ..., timeout SECONDS, server, own-server MODEL)"
            )
    return found


def parse_markdown(text: str, path: Path) -> list[Block]:
    """The runnable blocks of one Markdown document, in document order.

    A marker comment or output block that breaks the conventions does not raise: the block it
    belongs to (or a block standing for the stray marker) carries the ``problem``, so the run
    reports every problem with its file and line.
    """
    tokens = MarkdownIt("commonmark").parse(text)
    lines = text.splitlines()

    def adjacent(end: int, start: int) -> bool:
        """Only blank lines between 0-based line ``end`` (exclusive) and ``start``."""
        return all(not lines[i].strip() for i in range(end, start))

    blocks: list[Block] = []
    pending: tuple[int, int, str] | None = None  # (first line, end line, marker body)
    previous: tuple[Block, int] | None = None  # last runnable block and its end line

    def orphan(marker: tuple[int, int, str], why: str) -> None:
        line = marker[0] + 1
        blocks.append(Block(path, line, "marker", "", problem=f"{path}:{line}: {why}"))

    stray = "a doc-test marker must be right above the fenced block it is for"
    for tok in tokens:
        if tok.type == "html_block" and tok.map and MARKER.search(tok.content):
            if pending:
                orphan(pending, stray)
            bodies = "; ".join(m.group("body") for m in MARKER.finditer(tok.content))
            pending = (tok.map[0], tok.map[1], bodies)
            continue
        if tok.type != "fence" or not tok.map:
            continue
        start, end = tok.map
        lang = tok.info.strip().split(maxsplit=1)[0].lower() if tok.info.strip() else ""
        marker = None
        if pending:
            if adjacent(pending[1], start):
                marker = pending
            else:
                orphan(pending, stray)
            pending = None
        if lang not in RUN_LANGUAGES:
            if lang in OUTPUT_LANGUAGES and previous and adjacent(previous[1], start):
                if previous[0].kind == "console":
                    previous[0].problem = (
                        f"{path}:{start + 1}: a console block shows its output under each "
                        "'$ ' command, not in a ```text block after it"
                    )
                else:
                    previous[0].shown = tok.content
            if marker:
                orphan(
                    marker,
                    f"a doc-test marker above a block that does not run ({lang or 'untagged'}); "
                    "only bash, console and python blocks run",
                )
            previous = None
            continue
        block = Block(path, start + 1, RUN_LANGUAGES[lang], tok.content)
        if marker:
            try:
                items = parse_marker(marker[2], f"{path}:{marker[0] + 1}")
            except DocBlockError as exc:
                block.problem = str(exc)
            else:
                block.skip = items.get("skip")
                block.approx = items.get("approx", False)
                block.files = items.get("files", [])
                block.timeout_s = items.get("timeout_s", DEFAULT_TIMEOUT_S)
                block.own_server = items.get("own_server")
        if block.kind == "console" and not block.problem:
            try:
                block.commands()
            except DocBlockError as exc:
                block.problem = str(exc)
        blocks.append(block)
        previous = (block, end)
    if pending:
        orphan(pending, stray)
    return blocks


def parse_file(path: Path, root: Path | None = None) -> list[Block]:
    """:func:`parse_markdown` of a file; ``root`` makes the paths in messages relative. A file
    that cannot be read as UTF-8 gives one block carrying that problem."""
    shown = path.relative_to(root) if root else path
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return [Block(shown, 1, "file", "", problem=f"{shown}: cannot be read: {exc}")]
    return parse_markdown(text, shown)


def console_commands(text: str, first_line: int, where: str) -> list[Command]:
    """Split a console block into commands: ``$ `` lines, ``\\`` continuations, and the
    output lines under each (``first_line``: 1-based line of the block's first line).

    Raises:
        DocBlockError: text before the first ``$ `` (output of nothing), or no command.
    """
    commands: list[Command] = []
    output: list[str] = []
    rows = text.splitlines()
    i = 0

    def close() -> None:
        if commands:
            commands[-1].shown = "\n".join(output) + "\n" if output else None

    while i < len(rows):
        row = rows[i]
        if row.startswith("$ ") or row == "$":
            close()
            output = []
            number = first_line + i
            parts = [row[2:]]
            while parts[-1].rstrip().endswith("\\") and i + 1 < len(rows):
                i += 1
                parts.append(rows[i])
            commands.append(Command("\n".join(parts), None, number))
        elif not commands:
            if row.strip():
                raise DocBlockError(
                    f"{where}: a console block starts with '$ ' commands (line "
                    f"{first_line + i} is output of no command); use ```text for output alone"
                )
        else:
            output.append(row)
        i += 1
    close()
    if not commands:
        raise DocBlockError(f"{where}: a console block without a '$ ' command")
    return commands


NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def _line_pattern(line: str, numbers: list[str]) -> str:
    """A regex for one shown line: ``...`` → any text, each number → a number group (its
    shown text appended to ``numbers``), the rest literal."""
    out: list[str] = []
    for k, piece in enumerate(line.split("...")):
        if k:
            out.append(".*?")
        pos = 0
        for m in NUMBER.finditer(piece):
            out.append(re.escape(piece[pos : m.start()]))
            out.append(f"({NUMBER.pattern})")
            numbers.append(m.group())
            pos = m.end()
        out.append(re.escape(piece[pos:]))
    return "".join(out)


def number_matches(shown: str, seen: str, approx: bool) -> bool:
    """Whether the printed number ``seen`` agrees with the documented ``shown``.

    Integers must be equal. A number with a fraction part agrees within one unit of its last
    shown digit (``0.3833`` matches 0.38325953, ``2.7e-05`` matches 2.66e-05), and within a
    relative 1e-6 however many digits are shown (float32 results printed in full differ in
    their last digits between CPUs); with ``approx`` any number with a fraction part agrees
    with any other such number (timings, rates).
    """
    is_int = not re.search(r"[.eE]", shown)
    seen_int = not re.search(r"[.eE]", seen)
    if is_int or seen_int:
        return is_int and seen_int and int(shown) == int(seen)
    if approx:
        return True
    mantissa, _, exponent = shown.lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    unit = 10.0 ** (-decimals + (int(exponent) if exponent else 0))
    value, got = float(shown), float(seen)
    return abs(got - value) <= max(unit * 1.0000001, abs(value) * 1e-6)


def compare_output(shown: str, seen: str, approx: bool = False) -> str | None:
    """None when the output ``seen`` matches the ``shown`` one, else a diff that says why.

    Lines are compared without trailing spaces and blank lines at either end are ignored;
    ``...`` within a line matches any text, a line of only ``...`` any number of lines, and
    numbers are compared by :func:`number_matches`.
    """
    want = [ln.rstrip() for ln in shown.strip("\n").splitlines()]
    got = [ln.rstrip() for ln in seen.strip("\n").splitlines()]
    numbers: list[str] = []
    parts = []
    for line in want:
        if line.strip() == "...":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(_line_pattern(line, numbers) + r"\n")
    pattern = re.compile("".join(parts))
    text = "\n".join(got) + "\n"
    match = pattern.fullmatch(text)
    diff = "\n".join(difflib.unified_diff(want, got, "shown", "printed", lineterm=""))
    if match is None:
        return "the printed output differs from the shown one:\n" + diff
    bad = [
        f"{s} shown, {g} printed"
        for s, g in zip(numbers, match.groups(), strict=True)
        if not number_matches(s, g, approx)
    ]
    if bad:
        kind = "integers differ" if approx else "numbers differ beyond their shown precision"
        return f"{kind}: {'; '.join(bad)}\n{diff}"
    return None
