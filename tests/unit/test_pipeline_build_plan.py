"""What ``python -m builders.pipeline.build`` builds (:mod:`builders.pipeline.build_plan`): a
pipeline that is described but not generated yet stops it before anything is built, with one
line naming ``make pipeline NAME=...`` (it used to build every other model first, then crash
writing the drift profile and leave a model folder that made the generator refuse the name);
``--with-calls`` (``make serve MODELS=...``) adds the pipelines whose models the named ones
call."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from builders.pipeline import build, build_plan, generate
from tests.unit.pipeline_fixtures.workspace import TOY_TOML
from tritonrepo.description import discover, load
from tritonrepo.paths import MODEL_REPOSITORY, PIPELINES

NOT_GENERATED = (
    "error: toy: described but not generated yet; run `make pipeline NAME=toy` first "
    "(nothing built)"
)


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A checkout root with ``pipelines/toy`` (with ``[drift]``, as in the report) and an
    empty ``model_repository``; the build and the generator look there."""
    description = tmp_path / "pipelines" / "toy" / "pipeline.toml"
    description.parent.mkdir(parents=True)
    description.write_text(TOY_TOML + "\n[drift]\n")
    (tmp_path / "model_repository").mkdir()
    monkeypatch.setattr(build, "PIPELINES", tmp_path / "pipelines")
    monkeypatch.setattr(generate, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # main() prepends the checkout
    return tmp_path


def test_a_pipeline_not_generated_yet_stops_the_build_before_anything(checkout, capsys):
    repository = checkout / "model_repository"
    for names in (["toy"], []):  # named, and found among every description
        assert build.main([*names, "--repository", str(repository)]) == 1
        out, err = capsys.readouterr()
        assert (out, err.splitlines()) == ("", [NOT_GENERATED])
        assert list(repository.iterdir()) == []  # nothing left to clash with the generator
    # Generated, it builds, drift profile included.
    argv = ["pipeline", "toy", "--from", str(checkout / "pipelines/toy/pipeline.toml")]
    assert generate.main([*argv, "--repository", str(repository)]) == 0
    capsys.readouterr()
    assert build.main(["toy", "--repository", str(repository)]) == 0
    out = capsys.readouterr().out
    assert "toy: toy_model built in" in out, out
    assert (repository / "toy_model" / "1" / "model.onnx").is_file()
    assert (repository / "toy" / "drift_profile.json").is_file()


def test_with_calls_adds_the_pipelines_whose_models_the_named_ones_call(capsys, tmp_path):
    described = [load(path) for path in discover(PIPELINES)]
    by_name = {p.name: p for p in described}
    chosen = build_plan.with_calls([by_name["ctr_session"]], described)
    assert [p.name for p in build_plan.build_order(chosen)] == ["ctr_ranking", "ctr_session"]
    assert build_plan.with_calls([by_name["breast_cancer"]], described) == [
        by_name["breast_cancer"]
    ]
    assert build_plan.not_generated(described, MODEL_REPOSITORY) == []  # the shipped ones
    # Into an empty repository both are refused, before anything is built.
    empty = tmp_path / "model_repository"
    empty.mkdir()
    assert build.main(["--with-calls", "ctr_session", "--repository", str(empty)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "error: ctr_ranking, ctr_session: described but not generated yet; run `make pipeline "
        "NAME=ctr_ranking` and `make pipeline NAME=ctr_session` first (nothing built)"
    ]
    assert list(empty.iterdir()) == []
