"""``make bench-pipelines``, point 1: the lines a pipeline's author wrote.

Non-blank, non-comment lines of ``pipeline.toml`` and of the pipeline folder's ``.py`` files
except ``check_*.py`` and ``__init__.py``; docstring lines are counted apart from code lines.
"""

from __future__ import annotations

import ast
import io
import tokenize
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tritonrepo.description import Pipeline
from tritonrepo.paths import REPO_ROOT


@dataclass
class FileLines:
    """One file's lines: ``code`` (non-blank, non-comment, outside docstrings) and
    ``docstring`` (non-blank lines inside module/class/function docstrings)."""

    path: str
    code: int
    docstring: int


def _docstring_lines(source: str) -> set[int]:
    """1-based line numbers covered by module, class and function docstrings."""
    lines: set[int] = set()
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                lines.update(range(body[0].lineno, (body[0].end_lineno or body[0].lineno) + 1))
    return lines


def python_lines(path: Path) -> FileLines:
    """Count a ``.py`` file's code and docstring lines (comments and blank lines excluded)."""
    source = path.read_text()
    doc = _docstring_lines(source)
    comment_only: set[int] = set()
    code_tokens: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comment_only.add(tok.start[0])
        elif tok.type not in (
            tokenize.NL,
            tokenize.NEWLINE,
            tokenize.INDENT,
            tokenize.DEDENT,
            tokenize.ENDMARKER,
        ):
            code_tokens.update(range(tok.start[0], tok.end[0] + 1))
    text = source.splitlines()
    code = docstring = 0
    for number, line in enumerate(text, start=1):
        if not line.strip():
            continue
        if number in doc:
            docstring += 1
        elif number in code_tokens:
            code += 1
    return FileLines(path.relative_to(REPO_ROOT).as_posix(), code, docstring)


def toml_lines(path: Path) -> FileLines:
    """Count a TOML file's non-blank lines that are not ``#`` comments."""
    code = sum(
        1
        for line in path.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    )
    return FileLines(path.relative_to(REPO_ROOT).as_posix(), code, 0)


def user_lines(pipeline: Pipeline) -> dict[str, Any]:
    """The lines of the description and its code (module docstring, point 1)."""
    files = [toml_lines(pipeline.source)]
    for path in sorted(pipeline.folder.glob("*.py")):
        if path.name == "__init__.py" or path.name.startswith("check_"):
            continue
        files.append(python_lines(path))
    toml = files[0].code
    code = sum(f.code for f in files[1:])
    return {
        "toml": toml,
        "python_code": code,
        "python_docstrings": sum(f.docstring for f in files[1:]),
        "total": toml + code,
        "files": [asdict(f) for f in files],
    }
