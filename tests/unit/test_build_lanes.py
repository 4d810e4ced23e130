"""``make artifacts`` in two lanes (``builders.pipeline.build.build_in_two_lanes``): the builder
modules one after another beside the other pipelines, each pipeline after the ones whose models
it calls in either lane; and a builder module's outputs leave out the files the other lane
writes meanwhile (``builders.pipeline.module_build.build``'s ``others``).

The descriptions are the shipped ones; what a build does is replaced by a stand-in that records
when it ran (the lanes' logic is under test, not the builds: ``test_pipeline_build.py`` and
``test_module_build.py`` build for real)."""

from __future__ import annotations

import itertools
import subprocess
import threading
import time
from pathlib import Path

import pytest

from builders.pipeline import build, module_build
from tritonrepo.description import discover, load
from tritonrepo.paths import PIPELINES

SHIPPED = {p.name: p for p in map(load, discover(PIPELINES))}
STEP_S = 0.3  # how long each stand-in build takes


class Recorder:
    """A stand-in for ``build_and_say``: sleeps :data:`STEP_S`, records ``(name, start, end,
    others)``; fails the names in ``failing``, raises for those in ``raising``."""

    def __init__(self, failing: set[str] = frozenset(), raising: set[str] = frozenset()) -> None:
        self.runs: dict[str, tuple[float, float, tuple[str, ...]]] = {}
        self.failing, self.raising = failing, raising
        self.lock = threading.Lock()

    def __call__(self, pipeline, repository: Path, others=()) -> bool:
        start = time.monotonic()
        time.sleep(STEP_S)
        with self.lock:
            self.runs[pipeline.name] = (start, time.monotonic(), tuple(others))
        if pipeline.name in self.raising:
            raise RuntimeError(f"a bug in {pipeline.name}'s build")
        return pipeline.name not in self.failing


def lanes(names: list[str], monkeypatch, recorder: Recorder, needs=None) -> int:
    monkeypatch.setattr(build, "build_and_say", recorder)
    if needs is not None:
        monkeypatch.setattr(build, "called_pipelines", lambda pipelines: needs)
    ordered = build.build_order([SHIPPED[n] for n in names])
    return build.build_in_two_lanes(ordered, Path("/nowhere"))


def test_builder_modules_run_beside_the_other_pipelines(monkeypatch):
    recorder = Recorder()
    names = ["breast_cancer", "ctr_ranking", "digit_stream", "ctr_session", "image_classification"]
    assert lanes(names, monkeypatch, recorder) == 0
    runs = recorder.runs
    assert set(runs) == set(names)
    modules = ["ctr_ranking", "image_classification", "ctr_session"]  # build_order's order
    for a, b in itertools.pairwise(modules):  # one lane: one after another
        assert runs[a][1] <= runs[b][0], (a, b)
    assert runs["breast_cancer"][1] <= runs["digit_stream"][0]
    # The lanes overlap: the first of each starts before the other lane's first one ends.
    assert runs["breast_cancer"][0] < runs["ctr_ranking"][1]
    assert runs["ctr_ranking"][0] < runs["breast_cancer"][1]
    # The modules' outputs leave out the other lane's model folders, and only those.
    other = (*SHIPPED["breast_cancer"].models, *SHIPPED["digit_stream"].models)
    assert all(runs[m][2] == other for m in modules)
    assert runs["breast_cancer"][2] == runs["digit_stream"][2] == ()


def test_a_pipeline_waits_for_the_ones_it_calls_in_the_other_lane(monkeypatch):
    """digit_stream (no builder module) calls text_embedding's models here (a stand-in for the
    calls read from the descriptions): it starts once text_embedding's builder has ended,
    although its own lane is free; ctr_session waits for ctr_ranking in its own lane."""
    recorder = Recorder()
    names = ["ctr_ranking", "digit_stream", "text_embedding", "ctr_session"]
    needs = {"ctr_ranking": set(), "text_embedding": set(), "ctr_session": {"ctr_ranking"},
             "digit_stream": {"text_embedding"}}  # fmt: skip
    assert lanes(names, monkeypatch, recorder, needs) == 0
    runs = recorder.runs
    assert runs["digit_stream"][0] >= runs["text_embedding"][1]
    assert runs["ctr_session"][0] >= runs["ctr_ranking"][1]


def test_failures_are_counted_and_each_lane_goes_on(monkeypatch, capsys):
    recorder = Recorder(failing={"breast_cancer"}, raising={"ctr_ranking"})
    names = ["breast_cancer", "ctr_ranking", "digit_stream", "image_classification"]
    assert lanes(names, monkeypatch, recorder) == 2
    assert set(recorder.runs) == set(names)  # the lanes went on after each
    assert "RuntimeError: a bug in ctr_ranking's build" in capsys.readouterr().err


def test_a_builders_outputs_leave_out_the_other_lanes_model_folders(tmp_path, monkeypatch):
    """ctr_ranking's builder writes ctr_model and build/ctr while breast_cancer (the other lane)
    writes its model: the stamp records the builder's files alone."""
    repository = tmp_path / "model_repository"
    source = tmp_path / "builder.py"
    source.write_text("")
    monkeypatch.setattr(module_build, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(module_build, "STAMPS", tmp_path / "build" / "pipeline-builds")
    monkeypatch.setattr(module_build, "up_to_date", lambda *a: (False, "a test"))
    monkeypatch.setattr(module_build, "module_sources", lambda module: [source])
    monkeypatch.setattr(module_build, "sources_digest", lambda paths: "0" * 64)
    monkeypatch.setattr(module_build, "required_files", lambda *a: [])
    written = ["model_repository/ctr_model/1/model.onnx", "build/ctr/model.pt",
               "model_repository/breast_cancer_model/1/model.onnx"]  # fmt: skip

    def run(command, **kwargs):
        assert command[1:] == ["-m", "builders.onnx_export.ctr"]
        for relative in written:
            (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / relative).write_bytes(b"built")
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(module_build.subprocess, "run", run)
    pipeline = SHIPPED["ctr_ranking"]
    record = module_build.build(pipeline, repository, SHIPPED["breast_cancer"].models)
    assert record["outputs"] == ["build/ctr/model.pt", "model_repository/ctr_model/1/model.onnx"]
    for relative in written:  # without others, every file written is the builder's
        (tmp_path / relative).unlink()
    record = module_build.build(pipeline, repository)
    assert record["outputs"] == sorted(written)


@pytest.mark.parametrize("one_lane", [True, False])
def test_the_command_builds_every_pipeline_either_way(monkeypatch, one_lane, capsys):
    """``--one-lane`` builds one pipeline at a time; both ways every pipeline is built once."""
    recorder = Recorder()
    monkeypatch.setattr(build, "build_and_say", recorder)
    names = ["breast_cancer", "ctr_ranking", "ctr_session"]
    assert build.main([*names, *(["--one-lane"] if one_lane else [])]) == 0
    runs = sorted(recorder.runs.values())
    assert set(recorder.runs) == set(names)
    overlapping = any(a[1] > b[0] for a, b in itertools.pairwise(runs))
    assert overlapping is not one_lane
