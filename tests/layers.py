"""The layers of this repository and the import rule between them, read from the source with
``ast`` (imports inside functions included).

``python -m tests.layers`` prints the Mermaid graph that ``docs/architecture.md`` shows;
``tests/unit/test_layers.py`` fails when a module breaks the rule or the page's graph is stale.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Layer of a module, by longest matching dotted prefix; folders that are not packages
# (backends/, model_repository/) get pseudo-names.
LAYERS = {
    "tritonrepo": "shared: paths",
    "tritonrepo.step": "stub: step",
    "tritonrepo.runners": "stub: runners",
    "tritonrepo.text": "stub: models",
    "tritonrepo.ctr": "stub: models",
    "tritonrepo.image": "stub: models",
    "tritonrepo.pipelines": "stub: models",
    "tritonrepo.description": "description",
    "backends": "stub: backends",
    "model_repository": "stub: model.py",
    "tritonrepo.paths": "shared: paths",
    "tritonrepo.server": "server",
    "tritonrepo_client": "client: data plane",
    "tritonrepo_client.__init__": "client: package",
    "tritonrepo_client.__main__": "client: package",
    "tritonrepo_client.control": "client: control",
    "tritonrepo_client.cli": "client: cli",
    "tritonrepo_format": "repository format",
    "builders": "builders",
    "reference_data": "reference data",
    "benchmarks": "benchmarks",
    "pipelines": "pipelines",
    "tests": "tests",
    "tests.conftest": "tests: harness",
    "tests.pipeline_suite": "tests: harness",
}
STUB = {"stub: step", "stub: runners", "stub: models", "stub: backends", "stub: model.py"}
CLIENT = {
    "repository format",
    "client: data plane",
    "client: control",
    "client: cli",
    "client: package",
}
REPOSITORY = "repository format"  # the bottom layer: configs, config sets, data types
# What each layer may import (besides itself, the standard library and third-party packages).
ALLOWED = {
    "stub: step": {"shared: paths"},
    "stub: runners": {"stub: step", "shared: paths"},
    "stub: models": {"stub: step", "stub: runners", "shared: paths"},
    "stub: backends": {"stub: step", "stub: runners", "stub: models", "shared: paths"},
    "stub: model.py": {"stub: step", "stub: runners", "stub: models"},
    "shared: paths": set(),
    "repository format": set(),
    "client: data plane": {REPOSITORY},
    "client: control": {REPOSITORY, "client: data plane"},
    "client: cli": {REPOSITORY, "client: data plane", "client: control"},
    "client: package": {REPOSITORY, "client: data plane", "client: control", "client: cli"},
    "server": {
        "shared: paths",
        "stub: models",
        "stub: step",
        "stub: runners",
        "description",
        *CLIENT,
    },
    "builders": {
        "shared: paths",
        "reference data",
        "server",
        "description",
        "pipelines",
        *STUB,
        *CLIENT,
    },
    "reference data": {"shared: paths", "stub: models"},
    # A benchmark of a described pipeline starts its server and checks its answers with the
    # generated tests' harness (tests/conftest.py's server options, tests/pipeline_suite.py's
    # parity), so it measures what the tests check; no other test module.
    "benchmarks": {
        "shared: paths",
        "server",
        "reference data",
        "builders",
        "description",
        "pipelines",
        "tests: harness",
        *STUB,
        *CLIENT,
    },
    # The reader of pipelines/<name>/pipeline.toml: generator-side (the builders, the server and
    # the tests read descriptions; no step does), so it may read the repository's tables (data
    # types, config sets) from the client's bottom layer.
    "description": {"stub: models", "shared: paths", REPOSITORY},
    # pipelines/<name>/: a pipeline's own code. Its steps run in the Triton stub, so it may
    # import what a step may (the step base classes and helpers, this repository's model
    # logic); its samples and model build may read reference data. Not the server, the client
    # or the builders: they read the pipelines, never the other way round.
    "pipelines": {"stub: step", "stub: runners", "stub: models", "shared: paths", "reference data"},
    "tests": set(),
    "tests: harness": set(),
}
FIRST_PARTY = (
    "tritonrepo", "tritonrepo_client", "builders", "reference_data", "benchmarks", "pipelines",
    "tests",
)  # fmt: skip


@dataclass(frozen=True)
class Import:
    """One first-party import: the importing file (relative to the repository), its line, the
    module imported (dotted) and both layers."""

    path: str
    line: int
    module: str
    source_layer: str
    target_layer: str


def layer(module: str) -> str | None:
    """The layer of a dotted module name (longest prefix in ``LAYERS``), or None; the client
    package itself (``tritonrepo_client``, its ``__init__``) is its facade."""
    if module == "tritonrepo_client":
        return "client: package"
    best = None
    for prefix in LAYERS:
        if (module == prefix or module.startswith(prefix + ".")) and (
            best is None or len(prefix) > len(best)
        ):
            best = prefix
    return LAYERS[best] if best else None


def module_of(path: Path) -> str:
    """The dotted name a file is imported as (a package's ``__init__`` of the client as
    ``tritonrepo_client.__init__``: its own layer)."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts == ["tritonrepo_client", "__init__"]:
        return "tritonrepo_client.__init__"
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_module(dotted: str) -> bool:
    """Whether a dotted first-party name is a module or package of this repository."""
    base = ROOT.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _absolute(node: ast.ImportFrom, package: str) -> str:
    """The absolute module of ``from <dots><module> import ...`` inside ``package``."""
    if node.level == 0:
        return node.module or ""
    base = package.split(".")
    base = base[: len(base) - node.level + 1] if node.level > 1 else base
    return ".".join([*base, node.module] if node.module else base)


def _is_import_call(node: ast.AST) -> bool:
    """A call of ``import_module`` or ``__import__`` (attribute or bare name) with a literal
    module name."""
    if not isinstance(node, ast.Call) or not node.args:
        return False
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    first = node.args[0]
    return (
        name in ("import_module", "__import__")
        and isinstance(first, ast.Constant)
        and isinstance(first.value, str)
    )


def imports_in(source: str, package: str = "") -> Iterator[tuple[int, str]]:
    """``(line, dotted module)`` of every first-party import in ``source``: ``import a.b``,
    ``from a.b import c`` (as ``a.b.c`` too, c may be a module), relative imports (resolved
    against ``package``, the importing module's package), at any depth, and
    ``import_module("a.b")`` / ``__import__("a.b")`` with a literal name (a name built at run
    time cannot be read from the source; none is used)."""
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(node, package)
            members = [f"{module}.{a.name}" for a in node.names]
            names = [module] + [m for m in members if is_module(m)]
        elif _is_import_call(node):
            names = [node.args[0].value]  # type: ignore[attr-defined]
        for name in names:
            if name.split(".")[0] in FIRST_PARTY:
                yield node.lineno, name


def source_files() -> Iterator[Path]:
    """Every first-party Python file whose layer is known (tests excluded: they may import
    every layer)."""
    tops = (
        "tritonrepo",
        "tritonrepo_client",
        "tritonrepo_format",
        "builders",
        "reference_data",
        "benchmarks",
        "pipelines",
    )
    for top in (*tops, "backends"):
        yield from sorted((ROOT / top).rglob("*.py"))
    yield from sorted((ROOT / "model_repository").rglob("model.py"))


def file_layer(path: Path) -> str | None:
    """The layer of a file (``backends/`` and ``model_repository/`` by folder)."""
    top = path.relative_to(ROOT).parts[0]
    if top in ("backends", "model_repository"):
        return LAYERS[top]
    return layer(module_of(path))


def all_imports() -> list[Import]:
    """Every first-party import between two known layers, in file order."""
    found = []
    for path in source_files():
        source_layer = file_layer(path)
        if source_layer is None:
            raise LookupError(f"{path.relative_to(ROOT)} is in no layer: add it to LAYERS")
        name = module_of(path)
        package = name.removesuffix(".__init__") if path.name == "__init__.py" else ""
        package = package or name.rpartition(".")[0]
        for line, module in imports_in(path.read_text(), package):
            target = layer(module)
            if target is not None:
                rel = str(path.relative_to(ROOT))
                found.append(Import(rel, line, module, source_layer, target))
    return found


def violations(found: list[Import] | None = None) -> list[Import]:
    """The imports the rule forbids (``ALLOWED``)."""
    return [
        i
        for i in (all_imports() if found is None else found)
        if i.source_layer != i.target_layer and i.target_layer not in ALLOWED[i.source_layer]
    ]


def mermaid(found: list[Import] | None = None) -> str:
    """The layer graph as a Mermaid flowchart: an edge A --> B when A imports B."""
    found = all_imports() if found is None else found
    ids = {name: f"L{i}" for i, name in enumerate(sorted(set(LAYERS.values())))}
    edges = sorted(
        {(i.source_layer, i.target_layer) for i in found if i.source_layer != i.target_layer}
    )
    lines = ["flowchart TD"]
    lines += [f'    {ids[name]}["{name}"]' for name in sorted(ids)]
    lines += [f"    {ids[a]} --> {ids[b]}" for a, b in edges]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    bad = violations()
    for i in bad:
        print(
            f"{i.path}:{i.line}: {i.source_layer} imports {i.module} ({i.target_layer})",
            file=sys.stderr,
        )
    sys.stdout.write(mermaid())
    sys.exit(1 if bad else 0)
