"""Figures of the import graph of the code outside ``tests/``, read from the source with ``ast``:
what a reviewer counts to see whether modules stay apart.

``python -m tests.import_review [--list]`` prints:

* **import circles**: strongly connected components of more than one module in the graph of
  first-party imports at module level (``if TYPE_CHECKING:`` blocks left out: they run only for
  the type checker);
* **private cross-module imports**: ``from a.b import _name`` where ``_name`` is not the
  importing module's own (a module reaching into another's private names);
* **first-party imports inside functions** (how many, and in which packages).

``--list`` names each circle's modules and each private import. ``tests/unit/test_layers.py``
holds the figures below a ceiling, so they cannot grow back unnoticed.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from tests.layers import module_of, source_files

FIRST_PARTY = ("tritonrepo", "tritonrepo_client", "builders", "benchmarks", "pipelines",
               "reference_data", "backends")  # fmt: skip


@dataclass
class Review:
    """The figures (module docstring) and what they count."""

    edges: dict[str, set[str]] = field(default_factory=dict)  # module level
    all_edges: dict[str, set[str]] = field(default_factory=dict)  # imports in functions too
    private: list[tuple[str, str, str]] = field(default_factory=list)  # module, source, name
    inner: Counter[str] = field(default_factory=Counter)  # top package -> count
    inner_modules: Counter[str] = field(default_factory=Counter)  # module -> count

    def circles(self, inner: bool = False) -> list[list[str]]:
        """Strongly connected components of more than one module (Tarjan), each sorted; with
        ``inner``, of the graph with the imports inside functions too."""
        edges = self.all_edges if inner else self.edges
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        stack: list[str] = []
        on_stack: set[str] = set()
        out: list[list[str]] = []
        counter = [0]

        def visit(v: str) -> None:
            index[v] = low[v] = counter[0]
            counter[0] += 1
            stack.append(v)
            on_stack.add(v)
            for w in edges.get(v, ()):
                if w not in index:
                    visit(w)
                    low[v] = min(low[v], low[w])
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    out.append(sorted(component))

        sys.setrecursionlimit(10_000)
        for v in sorted(edges):
            if v not in index:
                visit(v)
        return sorted(out)


def _first_party(name: str) -> bool:
    return name.split(".")[0] in FIRST_PARTY


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.Module) -> Iterator[tuple[ast.stmt, bool]]:
    """Every import statement and whether it is at module level (not in a function, not under
    ``if TYPE_CHECKING``)."""

    def walk(nodes: list[ast.stmt], top: bool) -> Iterator[tuple[ast.stmt, bool]]:
        for node in nodes:
            if isinstance(node, ast.Import | ast.ImportFrom):
                yield node, top
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                yield from walk(node.body, False)
            elif isinstance(node, ast.ClassDef):
                yield from walk(node.body, top)
            elif isinstance(node, ast.If) and _type_checking(node):
                continue
            else:
                for child in ("body", "orelse", "finalbody", "handlers"):
                    inner = getattr(node, child, None)
                    if isinstance(inner, list):
                        yield from walk([n for n in inner if isinstance(n, ast.stmt)], top)
                if isinstance(node, ast.Try):
                    for handler in node.handlers:
                        yield from walk(handler.body, top)

    yield from walk(tree.body, True)


def _resolve(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".")[: -node.level]
    return ".".join([*base, node.module] if node.module else base)


def review() -> Review:
    """The figures of every first-party module outside ``tests/``."""
    result = Review()
    modules = {}
    for path in source_files():
        if path.parts[-2:-1] and "model_repository" in path.parts:
            continue  # a model folder's model.py is not imported by name
        name = module_of(path)
        if _first_party(name):
            modules[name.removesuffix(".__init__")] = path
    known = set(modules)

    def target(name: str) -> str | None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        result.edges.setdefault(name, set())
        result.all_edges.setdefault(name, set())
        for node, top in _imports(tree):
            if isinstance(node, ast.Import):
                sources = [a.name for a in node.names]
            else:
                source = _resolve(name, node)
                sources = [source]
                for alias in node.names:
                    submodule = f"{source}.{alias.name}"
                    if submodule in known:
                        sources.append(submodule)
                    elif (
                        alias.name.startswith("_")
                        and not alias.name.startswith("__")
                        and _first_party(source)
                        and target(source) != name
                    ):
                        result.private.append((name, source, alias.name))
            for source in sources:
                if not _first_party(source):
                    continue
                found = target(source)
                if found and found != name:
                    result.all_edges[name].add(found)
                if not top:
                    result.inner[name.split(".")[0]] += 1
                    result.inner_modules[name] += 1
                elif found and found != name:
                    result.edges[name].add(found)
    return result


def main(argv: list[str] | None = None) -> int:
    """Print the figures (and, with ``--list``, what they count)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--list", action="store_true")
    args = parser.parse_args(argv)
    r = review()
    circles = r.circles()
    print(f"import circles: {len(circles)} at module level, "
          f"{len(r.circles(inner=True))} with the imports inside functions")  # fmt: skip
    print(f"private cross-module imports: {len(r.private)}")
    inner = ", ".join(f"{k} {v}" for k, v in r.inner.most_common())
    print(f"first-party imports inside functions: {sum(r.inner.values())} ({inner})")
    if args.list:
        for circle in r.circles(inner=True):
            print("circle: " + " -> ".join(circle))
        for module, source, name in sorted(r.private):
            print(f"private: {module} imports {source}.{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
