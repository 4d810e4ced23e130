"""The import rule between the repository's layers (``tests/layers.py``,
``docs/architecture.md``): the client imports nothing from ``tritonrepo``; stub-side code imports
neither the server nor the client; the architecture page's graph is the one the source gives."""

from __future__ import annotations

import re

from tests import import_review, layers

# The figures of tests/import_review.py as they stand: a change that adds an import circle or a
# private cross-module import fails here, naming it, instead of growing them back unnoticed.
MAX_CIRCLES = 3  # with the imports inside functions (module level: 2)
MAX_PRIVATE_IMPORTS = 3
GENERATOR = ("builders.pipeline", "tritonrepo.description")  # the generator and its reader
MAX_GENERATOR_INNER_IMPORTS = 1  # plan_data's import of the build, kept off the plan builder


def test_no_module_breaks_the_import_rule():
    bad = layers.violations()
    assert not bad, "\n".join(
        f"{i.path}:{i.line}: {i.source_layer} may not import {i.module} ({i.target_layer})"
        for i in bad
    )


def test_the_client_imports_nothing_from_tritonrepo():
    client = [i for i in layers.all_imports() if i.path.startswith("tritonrepo_client/")]
    assert client, "no client imports were read"
    assert not [i for i in client if i.module.split(".")[0] == "tritonrepo"]


def test_a_forbidden_import_is_found_at_any_depth():
    """The reader sees module-level, function-level and importlib imports; the rule flags the
    client importing the server and a stub importing the client."""
    source = (
        "import tritonrepo.server.launcher\n"
        "def f():\n"
        "    from tritonrepo.server import preflight\n"
        "    import importlib\n"
        "    importlib.import_module('tritonrepo.paths')\n"
    )
    found = [module for _, module in layers.imports_in(source)]
    assert found == [
        "tritonrepo.server.launcher",
        "tritonrepo.server",
        "tritonrepo.server.preflight",
        "tritonrepo.paths",
    ]
    fake = [
        layers.Import(
            "tritonrepo_client/x.py", 1, "tritonrepo.server", "client: data plane", "server"
        ),
        layers.Import(
            "tritonrepo/step/x.py", 1, "tritonrepo_client", "stub: step", "client: package"
        ),
        layers.Import(
            "tritonrepo_client/cli/x.py",
            1,
            "tritonrepo_client.control",
            "client: cli",
            "client: control",
        ),
    ]
    assert [i.path for i in layers.violations(fake)] == [
        "tritonrepo_client/x.py",
        "tritonrepo/step/x.py",
    ]


def test_architecture_page_shows_the_current_graph():
    page = (layers.ROOT / "docs" / "architecture.md").read_text()
    shown = re.search(r"```mermaid\n(.*?)```", page, re.S)
    assert shown, "docs/architecture.md has no mermaid block"
    assert shown[1] == layers.mermaid(), (
        "docs/architecture.md's graph is stale: paste the output of `python -m tests.layers`"
    )


def test_the_client_finds_this_checkout_through_its_entry_point(monkeypatch, tmp_path):
    """Installed with the server package, the client reads this checkout's repository, key file
    and preflight through the ``tritonrepo_client.local`` entry point; without it, paths relative
    to the working directory and no checks."""
    from tritonrepo.paths import BUILD_DIR, MODEL_REPOSITORY
    from tritonrepo_client.control import local

    local.local_repository.cache_clear()
    found = local.local_repository()
    assert (found.model_repository, found.key_file) == (
        MODEL_REPOSITORY,
        BUILD_DIR / "repository.key",
    )
    assert found.check(MODEL_REPOSITORY, "no_such_model", None), "the preflight found nothing"

    monkeypatch.setattr(local, "entry_points", lambda group: [])
    monkeypatch.chdir(tmp_path)
    local.local_repository.cache_clear()
    try:
        bare = local.local_repository()
        assert bare.model_repository == tmp_path / "model_repository"
        assert bare.check(tmp_path, "anything", None) == []
    finally:
        local.local_repository.cache_clear()


def test_relative_and_dunder_imports_are_read_too():
    """``from ..server import x`` inside ``tritonrepo.step`` and ``__import__("...")`` count as
    imports of what they name; the bare package ``tritonrepo`` has a layer the client may not
    import."""
    source = (
        "from ..server import launcher\n"
        "from . import errors\n"
        "__import__('tritonrepo.server.preflight')\n"
        "from importlib import import_module\n"
        "import_module('tritonrepo_client.control')\n"
        "import tritonrepo\n"
    )
    found = sorted(module for _, module in layers.imports_in(source, "tritonrepo.step"))
    assert found == sorted(
        [
            "tritonrepo.server",
            "tritonrepo.server.launcher",
            "tritonrepo.step",
            "tritonrepo.step.errors",
            "tritonrepo.server.preflight",
            "tritonrepo_client.control",
            "tritonrepo",
        ]
    )
    assert layers.layer("tritonrepo") not in layers.ALLOWED["client: data plane"]


def test_pipelines_benchmarks_and_the_description_reader_have_their_rule():
    """A pipeline's own code (``pipelines/``) imports what a step may, not the builders, the
    server or the client; a benchmark imports the tests' harness (``tests.conftest``,
    ``tests.pipeline_suite``), no other test module; the description reader may read the
    repository's bottom layer, which stub-side code may not import it for."""
    cases = {
        ("pipelines/p/steps.py", "tritonrepo.step.errors"): True,
        ("pipelines/p/steps.py", "tritonrepo.image.preprocess"): True,
        ("pipelines/p/samples.py", "reference_data.photos"): True,
        ("pipelines/p/model.py", "builders.onnx_export.quantization"): False,
        ("pipelines/p/steps.py", "tritonrepo_format.dtypes"): False,
        ("pipelines/p/steps.py", "tritonrepo.server.launcher"): False,
        ("benchmarks/b.py", "tests.conftest"): True,
        ("benchmarks/b.py", "tests.pipeline_suite"): True,
        ("benchmarks/b.py", "tests.server.test_priority"): False,
        ("tritonrepo/description/schema.py", "tritonrepo_format.dtypes"): True,
        ("tritonrepo/pipelines/function_step.py", "tritonrepo.description"): False,
        ("tritonrepo/pipelines/session_step.py", "tritonrepo.description.stateful"): False,
        ("builders/pipeline/build.py", "pipelines.breast_cancer.model"): True,
    }
    found = []
    for path, module in cases:
        source = layers.layer(layers.module_of(layers.ROOT / path))
        found.append(layers.Import(path, 1, module, source, layers.layer(module)))
    bad = {(i.path, i.module) for i in layers.violations(found)}
    assert {case: case not in bad for case in cases} == cases
    assert layers.layer("pipelines.breast_cancer.steps") == "pipelines"
    assert layers.layer("tritonrepo.description.stateful") == "description"
    assert layers.layer("tritonrepo.pipelines.session_step") == "stub: models"


def test_import_circles_and_private_imports_stay_under_their_ceiling():
    """``python -m tests.import_review``'s figures stay at or below the ceilings above, and the
    generator (``builders/pipeline``, ``tritonrepo/description``) is in no import circle and
    takes no other module's private names."""
    review = import_review.review()
    circles = review.circles(inner=True)
    assert len(circles) <= MAX_CIRCLES, circles
    assert len(review.circles()) <= len(circles)
    assert len(review.private) <= MAX_PRIVATE_IMPORTS, review.private

    def generator(module: str) -> bool:
        return module.startswith(GENERATOR)

    assert not [c for c in circles if any(generator(m) for m in c)]
    assert not [p for p in review.private if generator(p[0]) or generator(p[1])]
    inner = {m: n for m, n in review.inner_modules.items() if generator(m)}
    assert sum(inner.values()) <= MAX_GENERATOR_INNER_IMPORTS, inner
