"""The generator (``tritonrepo-new``, builders.pipeline.generate) on the toy pipeline of
``tests/unit/pipeline_fixtures``, in a temporary checkout: the files it creates, that they parse
and chain, that it is idempotent, guards hand edits, follows description changes, and that
``--check`` tells stale from up to date; the shipped image_classification is its output; the
health probe it declares is valid for the client.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2 as mc

from builders.pipeline import generate
from builders.pipeline.kinds import sample_checks
from tests.unit.pipeline_fixtures.toy import samples as toy_samples
from tests.unit.pipeline_fixtures.workspace import OTHER_CONFIG, PACKAGE, Workspace
from tritonrepo.description import load
from tritonrepo.paths import MODEL_REPOSITORY, PIPELINES, REPO_ROOT
from tritonrepo_client.control.probe_declaration import InvalidProbe, declared_probe
from tritonrepo_format.configs import check_ensemble

EXPECTED = {
    "toy/config.pbtxt",
    "toy/1/.gitkeep",
    "toy/1/model.py",
    "toy/configs/cpu.pbtxt",
    "toy_preprocess/config.pbtxt",
    "toy_preprocess/1/model.py",
    "toy_model/config.pbtxt",
    "toy_model/configs/cpu.pbtxt",
    "toy_model/configs/torch_gpu.pbtxt",
    "toy_model/1/.gitkeep",
    "toy_postprocess/config.pbtxt",
    "toy_postprocess/1/model.py",
}
OLD = 1_000_000_000_000_000_000  # an mtime (ns, 2001) no write can leave in place


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    return Workspace(tmp_path.resolve(), monkeypatch)


@pytest.fixture
def generated(ws: Workspace) -> Workspace:
    """The workspace after a first successful run."""
    result = ws.run()
    assert result.rc == 0, result.err
    return ws


def parse(path: Path) -> mc.ModelConfig:
    return text_format.Parse(path.read_text(), mc.ModelConfig())


def age(ws: Workspace) -> None:
    """Set every file's mtime to :data:`OLD`, so any rewrite shows."""
    for p in ws.root.rglob("*"):
        if p.is_file():
            os.utime(p, ns=(OLD, OLD))


# --- the first run ----------------------------------------------------------------------------
def test_first_run_creates_the_expected_files(generated: Workspace):
    ws = generated
    assert ws.files() == EXPECTED | {"other_model/config.pbtxt"}
    assert (ws.repository / "other_model/config.pbtxt").read_text() == OTHER_CONFIG
    for keep in ("toy/1/.gitkeep", "toy_model/1/.gitkeep"):
        assert (ws.repository / keep).read_text() == ""
    for step, ref in (("toy_preprocess", "preprocess"), ("toy_postprocess", "postprocess")):
        lines = (ws.repository / step / "1/model.py").read_text().splitlines()
        assert len(lines) == 7, lines
        assert lines[2] == "from tritonrepo.pipelines.function_step import FunctionStep"
        assert lines[5] == "class TritonPythonModel(FunctionStep):"
        assert lines[0].startswith('"""toy step ') and len(lines[0]) <= 100, lines[0]
        config = (ws.repository / step / "config.pbtxt").read_text()
        assert f'string_value: "{PACKAGE}.steps:{ref}"' in config  # what the step runs
    assert (
        "X, TAG -> features, TAG_LENGTH"
        in (ws.repository / "toy_preprocess/1/model.py").read_text()
    )

    module = ws.tests_module.read_text()
    assert 'DESCRIPTION = "pipelines/toy/pipeline.toml"' in module
    assert "class TestToy(PipelineSuite):" in module
    compile(module, str(ws.tests_module), "exec")

    manifest = json.loads(ws.manifest.read_text())
    assert manifest["description"] == "pipelines/toy/pipeline.toml"
    assert set(manifest["files"]) == {f"model_repository/{f}" for f in EXPECTED} | {
        "tests/pipelines/test_toy.py"
    }
    for path, digest in manifest["files"].items():
        assert generate._digest((ws.root / path).read_text()) == digest, path


def test_first_run_reports_every_file_created(ws: Workspace):
    result = ws.run()
    assert result.rc == 0
    created = {line.split()[1] for line in result.out.splitlines() if line.startswith("create")}
    assert created == {f"model_repository/{f}" for f in EXPECTED} | {"tests/pipelines/test_toy.py"}
    assert "toy: 13 of 13 files written" in result.out
    # The next step builds this pipeline (and what it calls) only and serves it alone, with
    # the HTTP guard's packages: a make target and variable that exist.
    next_line = result.out.splitlines()[-1]
    assert next_line == (
        "next: make serve MODELS=toy   (builds its model and what it calls, then serves it)"
    )
    dry_run = subprocess.run(
        ["make", "--no-print-directory", "-n", "serve", "MODELS=toy"],
        cwd=REPO_ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    commands = dry_run.stdout.splitlines()[-2:]
    assert commands[0].endswith("-m builders.pipeline.build --with-calls toy"), dry_run.stdout
    assert commands[1].rstrip().endswith("-m tritonrepo.server.serve --model toy"), dry_run.stdout
    assert "libnginx-mod-http-js" in dry_run.stdout  # guard-deps runs first


def test_generated_configs_parse_and_say_what_they_run(generated: Workspace):
    repo = generated.repository
    pbtxt = sorted(p.relative_to(repo).as_posix() for p in repo.glob("toy*/**/*.pbtxt"))
    assert pbtxt == sorted(f for f in EXPECTED if f.endswith(".pbtxt"))
    configs = {f: parse(repo / f) for f in pbtxt}
    for name, cfg in configs.items():
        assert cfg.name == name.split("/")[0]
        assert cfg.max_batch_size == 8

    ensemble = configs["toy/config.pbtxt"]
    assert ensemble.platform == "ensemble"
    assert [s.model_name for s in ensemble.ensemble_scheduling.step] == [
        "toy_preprocess", "toy_model", "toy_postprocess"
    ]  # fmt: skip
    pre, _, post = ensemble.ensemble_scheduling.step
    assert dict(pre.output_map) == {"features": "features", "TAG_LENGTH": "TAG_LENGTH"}
    assert dict(post.input_map) == {"scores": "scores", "TAG_LENGTH": "TAG_LENGTH"}

    cpu = configs["toy_model/configs/cpu.pbtxt"]
    assert (cpu.backend, cpu.default_model_filename) == ("onnxruntime_python", "model.onnx")
    assert [(t.name, t.data_type, list(t.dims)) for t in cpu.input] == [
        ("features", mc.TYPE_FP32, [4])
    ]
    assert [(t.name, t.data_type, list(t.dims)) for t in cpu.output] == [
        ("scores", mc.TYPE_FP32, [2])
    ]
    assert [g.kind for g in cpu.instance_group] == [mc.ModelInstanceGroup.KIND_CPU]
    # No torch.export program is built for a build() core: the torch_gpu set runs the ONNX
    # model with ONNX Runtime too, so switching a server to that set keeps the pipeline up.
    torch_gpu = configs["toy_model/configs/torch_gpu.pbtxt"]
    assert (torch_gpu.backend, torch_gpu.default_model_filename) == (
        "onnxruntime_python", "model.onnx"
    )  # fmt: skip
    assert [g.kind for g in torch_gpu.instance_group] == [mc.ModelInstanceGroup.KIND_CPU]
    # Triton's plain queue unless the description asks for priority levels.
    assert not torch_gpu.dynamic_batching.HasField("default_queue_policy")
    gpu = configs["toy_model/config.pbtxt"]
    assert gpu.platform == "tensorrt_plan"
    assert list(gpu.dynamic_batching.preferred_batch_size) == [8]

    step = configs["toy_preprocess/config.pbtxt"]
    assert step.backend == "python"
    assert step.parameters["function"].string_value == f"{PACKAGE}.steps:preprocess"
    assert [(t.name, t.data_type) for t in step.input] == [("X", mc.TYPE_FP32),
                                                          ("TAG", mc.TYPE_STRING)]  # fmt: skip
    post_cfg = configs["toy_postprocess/config.pbtxt"]
    assert post_cfg.parameters["function"].string_value == f"{PACKAGE}.steps:postprocess"
    assert [t.name for t in post_cfg.output] == ["SCORES", "LABEL"]

    # The cpu set serves the pipeline as one Python-backend model: both functions and the core.
    one = configs["toy/configs/cpu.pbtxt"]
    assert one.backend == "python" and not one.platform
    assert [t.name for t in one.input] == [t.name for t in ensemble.input]
    assert [t.name for t in one.output] == [t.name for t in ensemble.output]
    parameters = {k: v.string_value for k, v in one.parameters.items()}
    assert parameters["preprocess"] == f"{PACKAGE}.steps:preprocess"
    assert parameters["postprocess"] == f"{PACKAGE}.steps:postprocess"
    assert parameters["core_model"] == "toy_model"
    produced = [t["name"] for t in json.loads(parameters["preprocess_outputs"])]
    assert produced == ["features", "TAG_LENGTH"]  # the core's input, then the extra tensor
    # Triton's plain queue: the batcher prefetches instead of waiting for a free instance.
    queue = one.dynamic_batching
    assert queue.priority_levels == 0 and not queue.HasField("default_queue_policy")
    assert "(OneStep)" in (repo / "toy/1/model.py").read_text()
    from tritonrepo.pipelines.fused_step import FusedStep
    from tritonrepo.pipelines.one_step import OneStep

    assert OneStep.form(one.parameters) is FusedStep  # what configs/cpu.pbtxt runs


@pytest.mark.parametrize("config_name", [None, "cpu"], ids=["gpu", "cpu"])
def test_generated_ensemble_passes_check_ensemble(generated: Workspace, config_name: str | None):
    assert check_ensemble(generated.repository, "toy", config_name) == []


def test_check_ensemble_would_catch_a_broken_chain(generated: Workspace):
    """The control of the test above: check_ensemble does look at the generated steps."""
    path = generated.repository / "toy_model/configs/cpu.pbtxt"
    path.write_text(path.read_text().replace("dims: [ 4 ]", "dims: [ 5 ]"))
    assert check_ensemble(generated.repository, "toy", "cpu") != []


# --- idempotence, hand edits, description changes ---------------------------------------------
def test_second_run_changes_nothing(generated: Workspace):
    ws = generated
    changes = generate.plan(ws.load(), ws.repository)
    assert [c.action for c in changes] == ["same"] * 13
    age(ws)
    before = ws.snapshot()
    result = ws.run()
    assert result.rc == 0
    assert result.out.strip() == "toy: up to date (13 files)"
    assert ws.snapshot() == before  # contents and mtimes (manifest included)
    assert all(mtime == OLD for _, mtime in before.values())


def test_hand_edit_fails_naming_the_file_and_force_overwrites(generated: Workspace):
    ws = generated
    path = ws.repository / "toy_model/configs/cpu.pbtxt"
    original = path.read_text()
    path.write_text(original.replace("max_batch_size: 8", "max_batch_size: 16"))
    actions = {c.path: c.action for c in generate.plan(ws.load(), ws.repository)}
    assert actions.pop("model_repository/toy_model/configs/cpu.pbtxt") == "edited"
    assert set(actions.values()) == {"same"}

    before = ws.snapshot()
    result = ws.run()
    assert result.rc == 1
    assert "edited by hand since generated: model_repository/toy_model/configs/cpu.pbtxt" in (
        result.err
    )
    assert "--force" in result.err
    assert ws.snapshot() == before  # the edit stays, nothing else written

    assert ws.run("--check").rc == 1  # an edited file is stale too
    result = ws.run("--force")
    assert result.rc == 0, result.err
    assert path.read_text() == original
    assert "update  model_repository/toy_model/configs/cpu.pbtxt" in result.out
    assert ws.run("--check").rc == 0


def test_description_change_regenerates_without_force(generated: Workspace):
    ws = generated
    ws.edit_description("max_batch_size = 8", "max_batch_size = 4")
    age(ws)
    result = ws.run()
    assert result.rc == 0, result.err
    updated = {line.split()[1] for line in result.out.splitlines() if line.startswith("update")}
    assert updated == {f"model_repository/{f}" for f in EXPECTED if f.endswith(".pbtxt")}
    for f in EXPECTED:
        if f.endswith(".pbtxt"):
            assert parse(ws.repository / f).max_batch_size == 4, f
    after = ws.snapshot()
    assert after["model_repository/toy/1/.gitkeep"][1] == OLD  # unchanged files not rewritten
    assert after["model_repository/toy_preprocess/1/model.py"][1] == OLD
    manifest = json.loads(ws.manifest.read_text())["files"]
    cpu = "model_repository/toy_model/configs/cpu.pbtxt"
    assert manifest[cpu] == generate._digest((ws.root / cpu).read_text())
    assert ws.run("--check").rc == 0


def test_description_change_of_a_function_updates_the_step(generated: Workspace):
    ws = generated
    ws.edit_description(':postprocess"', ':postprocess_without_label"\n')
    assert ws.run().rc == 1  # the check runs first: LABEL is missing; nothing written
    ws.edit_description(':postprocess_without_label"\n', ':postprocess"')
    ws.edit_description("[model]", "[model]\ncpu = { instances = 2 }")
    result = ws.run()
    assert result.rc == 0, result.err
    assert result.out.splitlines()[0] == "update  model_repository/toy_model/configs/cpu.pbtxt"
    cpu = parse(ws.repository / "toy_model/configs/cpu.pbtxt")
    assert [g.count for g in cpu.instance_group] == [2]


def test_check_exits_1_when_stale_and_0_when_up_to_date(ws: Workspace):
    before = ws.snapshot()
    result = ws.run("--check")
    assert (result.rc, result.out.splitlines()[-1]) == (1, "13 of 13 files would change")
    assert ws.snapshot() == before  # --check writes nothing, not even the manifest

    assert ws.run().rc == 0
    result = ws.run("--check")
    assert (result.rc, result.out.strip()) == (0, "up to date")

    ws.edit_description("dims = [1] }]", 'dims = [1], doc = "bytes per tag" }]')
    ws.edit_description('summary = "Toy:', 'summary = "Toy pipeline:')
    before = ws.snapshot()
    result = ws.run("--check")
    assert result.rc == 1
    assert "update  model_repository/toy/config.pbtxt" in result.out
    assert ws.snapshot() == before


def test_temp_repository_outside_the_checkout_is_reported_by_absolute_path(
    ws: Workspace, tmp_path_factory: pytest.TempPathFactory
):
    elsewhere = tmp_path_factory.mktemp("elsewhere").resolve()
    pipeline = ws.load()
    changes = generate.plan(pipeline, elsewhere)
    repo_paths = {c.path for c in changes if not c.path.startswith("tests/")}
    assert repo_paths == {str(elsewhere / f) for f in EXPECTED}
    generate.write(pipeline, changes)
    for f in EXPECTED:
        assert (elsewhere / f).is_file(), f
    assert not (ws.repository / "toy").exists()
    assert set(json.loads(ws.manifest.read_text())["files"]) == {c.path for c in changes}


def test_second_run_into_a_repository_outside_the_checkout_is_up_to_date(
    ws: Workspace, tmp_path_factory: pytest.TempPathFactory
):
    """Its models are owned (recorded by absolute path), so they are no clash."""
    elsewhere = tmp_path_factory.mktemp("elsewhere").resolve()
    assert ws.run(repository=elsewhere).rc == 0
    changes = generate.plan(ws.load(), elsewhere)
    assert {c.action for c in changes} == {"same"}
    result = ws.run("--check", repository=elsewhere)
    assert (result.rc, result.out.strip()) == (0, "up to date")


def test_write_with_a_description_outside_the_checkout(
    ws: Workspace, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
):
    """The real REPO_ROOT: the description (a temp copy) and the repository both outside it;
    ``tests = false`` keeps the tests module (always tests/pipelines/ of the checkout) out."""
    monkeypatch.setattr(generate, "REPO_ROOT", REPO_ROOT)
    elsewhere = tmp_path_factory.mktemp("elsewhere").resolve()
    ws.edit_description("max_batch_size = 8", "max_batch_size = 8\ntests = false")
    pipeline = ws.load()
    changes = generate.plan(pipeline, elsewhere)
    assert {c.path for c in changes} == {str(elsewhere / f) for f in EXPECTED}
    generate.write(pipeline, changes)
    assert {p.relative_to(elsewhere).as_posix() for p in elsewhere.rglob("*") if p.is_file()} == (
        EXPECTED
    )
    manifest = json.loads(ws.manifest.read_text())
    assert manifest["description"] == str(ws.description)
    assert set(manifest["files"]) == {str(elsewhere / f) for f in EXPECTED}


# --- the shipped pipeline ---------------------------------------------------------------------
def test_shipped_image_classification_is_generated():
    assert generate.main(["pipeline", "image_classification", "--check"]) == 0
    pipeline = load(PIPELINES / "image_classification/pipeline.toml")
    changes = generate.plan(pipeline, MODEL_REPOSITORY)
    assert {c.action for c in changes} == {"same"}
    recorded = json.loads((PIPELINES / "image_classification" / generate.MANIFEST).read_text())
    assert recorded["files"] == {c.path: generate._digest(c.text) for c in changes}
    for change in changes:
        assert (REPO_ROOT / change.path).read_text() == change.text, change.path
    assert {Path(c.path).parts[1] for c in changes} == {
        "image_classification", "image_preprocess", "image_classifier", "image_postprocess"
    }  # fmt: skip
    # the ensemble's config, the classifier's four (config.pbtxt, cpu, torch_gpu, torch_aoti),
    # the steps' configs and model.py, two version folders' .gitkeep
    assert len(changes) == 12


def test_check_notices_a_stale_shipped_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
):
    """The control of the test above, on a copy of the shipped description and its folders
    (a fake checkout: ``generate.REPO_ROOT`` points at it)."""
    pipeline = load(PIPELINES / "image_classification/pipeline.toml")
    root = tmp_path.resolve()
    copies = [PIPELINES / "image_classification" / n for n in ("pipeline.toml", generate.MANIFEST)]
    for model in pipeline.models:
        copies += [p for p in (MODEL_REPOSITORY / model).rglob("*") if p.is_file()
                   and (p.suffix in (".pbtxt", ".py") or p.name == ".gitkeep")]  # fmt: skip
    for path in copies:
        target = root / path.relative_to(REPO_ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text())
    monkeypatch.setattr(generate, "REPO_ROOT", root)
    monkeypatch.setattr(sys, "path", list(sys.path))  # main() prepends REPO_ROOT
    argv = ["pipeline", "image_classification", "--check", "--repository",
            str(root / "model_repository"), "--from",
            str(root / "pipelines/image_classification/pipeline.toml")]  # fmt: skip
    assert generate.main(argv) == 0
    cfg = root / "model_repository/image_classifier/configs/cpu.pbtxt"
    cfg.write_text(cfg.read_text() + "# hand edit\n")
    capsys.readouterr()
    assert generate.main(argv) == 1
    out = capsys.readouterr().out
    assert "edited  model_repository/image_classifier/configs/cpu.pbtxt" in out
    assert "1 of 12 files would change" in out


# --- the health probe -------------------------------------------------------------------------
def probe_of(text: str):
    return declared_probe({"parameters": {"tritonrepo_probe": {"string_value": text}}}, "toy")


def test_probe_json_is_a_valid_declaration_of_the_smallest_sample_row(ws: Workspace):
    samples = toy_samples.samples()
    text = sample_checks.probe_json(ws.load(), samples)
    probe = probe_of(text)
    row = toy_samples.SMALLEST_ROW
    assert set(probe.inputs) == {"X", "TAG"}
    np.testing.assert_array_equal(probe.inputs["X"], samples["X"][row : row + 1])
    assert probe.inputs["X"].dtype == np.float32
    assert probe.inputs["TAG"].tolist() == [[toy_samples.BINARY_TAG]]
    assert [o.name for o in probe.outputs] == ["SCORES", "LABEL"]
    assert all(o.data is None for o in probe.outputs)  # named only: each must come back

    spec = json.loads(text)
    tag = next(t for t in spec["inputs"] if t["name"] == "TAG")
    assert tag == {"name": "TAG", "datatype": "BYTES", "shape": [1, 1],
                   "data": [{"b64": base64.b64encode(b"\xff\x00").decode()}]}  # fmt: skip
    x = next(t for t in spec["inputs"] if t["name"] == "X")
    assert x["data"] == [1.2, 1.3, 1.4, 1.5]  # shortest text of each float32


def test_probe_json_sends_utf8_bytes_as_strings(ws: Workspace):
    samples = toy_samples.utf8_samples()
    spec = json.loads(sample_checks.probe_json(ws.load(), samples))
    tag = next(t for t in spec["inputs"] if t["name"] == "TAG")
    assert tag["data"] == ["é"]  # row 0: the smallest now
    probe = probe_of(json.dumps(spec))
    assert probe.inputs["TAG"].tolist() == [["é".encode()]]
    np.testing.assert_array_equal(probe.inputs["X"], samples["X"][:1])


def test_generated_ensemble_declares_the_probe(generated: Workspace):
    cfg = parse(generated.repository / "toy/config.pbtxt")
    as_json = json_format.MessageToDict(cfg, preserving_proto_field_name=True)
    probe = declared_probe(as_json, "toy")
    assert probe is not None
    assert probe.inputs["TAG"].tolist() == [[toy_samples.BINARY_TAG]]
    assert cfg.parameters["tritonrepo_probe"].string_value == sample_checks.probe_json(
        generated.load(), toy_samples.samples()
    )


def test_declared_probe_rejects_a_broken_declaration():
    """The control of the tests above: declared_probe does validate."""
    with pytest.raises(InvalidProbe):
        probe_of('{"inputs": [{"name": "TAG", "datatype": "BYTES", "shape": [1, 1], '
                 '"data": [{"b64": "%%%"}]}]}')  # fmt: skip
    with pytest.raises(InvalidProbe):
        probe_of('{"inputs": []}')


def test_a_step_that_calls_a_model_declares_it_and_the_launcher_loads_it(ws: Workspace):
    """``calls`` on a step class becomes its configs' ``tritonrepo_calls`` parameter, which
    the launcher follows: serving the pipeline alone loads the called model too."""
    from tritonrepo.server.options import ServerOptions
    from tritonrepo_client.control.model_calls import declared_calls

    ws.edit_description(
        f'function = "{PACKAGE}.steps:postprocess"',
        'step = "tritonrepo.image.steps:PostprocessStep"\ncalls = ["other_model"]',
    )
    result = ws.run()
    assert result.rc == 0, result.err
    config = json_format.MessageToDict(
        parse(ws.repository / "toy_postprocess/config.pbtxt"), preserving_proto_field_name=True
    )
    assert declared_calls(config) == ("other_model",)
    options = ServerOptions(model_repository=ws.repository, models=("toy",), model_config_name=None)
    assert options.load_models == ("other_model", "toy")
