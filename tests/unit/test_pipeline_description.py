"""Bad pipeline descriptions: each gets a DescriptionError naming the field and the fix, and
``tritonrepo-new`` writes nothing (the temporary checkout is byte-for-byte and mtime unchanged).

The description is the toy pipeline of ``tests/unit/pipeline_fixtures`` (an ``onnx.helper``
MatMul/Add/Identity graph, numpy steps, 8 samples), edited one field at a time. Structural
problems come from ``tritonrepo.description.load``; those needing the graph, the
functions or the repository from the kind's checks (``builders.pipeline.kinds``, through
``generate.plan``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from builders.pipeline import generate
from tests.unit.pipeline_fixtures.workspace import PACKAGE, TOY_TOML, Workspace, edited
from tritonrepo.description import DTYPES, DescriptionError, load, parse


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Workspace:
    return Workspace(tmp_path.resolve(), monkeypatch)


def problems_of(ws: Workspace) -> list[str]:
    """The problems of the workspace's description: from load, else from plan."""
    with pytest.raises(DescriptionError) as info:
        generate.plan(ws.load(), ws.repository)
    assert str(info.value) == "\n".join(info.value.problems)
    return info.value.problems


def find(problems: list[str], source: Path, field: str, *fragments: str) -> str:
    """The one problem of ``field`` (``<source>: <field>: ...``) holding every fragment."""
    prefix = f"{source}: {field}: "
    hits = [p for p in problems if p.startswith(prefix) and all(f in p for f in fragments)]
    assert len(hits) == 1, f"no single problem {prefix}... with {fragments} in:\n" + "\n".join(
        problems
    )
    return hits[0]


@dataclass(frozen=True)
class Case:
    """An edit of the toy description and the problem it must cause."""

    id: str
    edit: Callable[[str], str]
    field: str
    fragments: tuple[str, ...]
    structural: bool  # found by load() (else by the checks)


def sub(old: str, new: str) -> Callable[[str], str]:
    return lambda text: edited(text, old, new)


X_TABLE = '[[input]]\nname = "X"\ndtype = "FP32"\ndims = [4]\n'
TAG_TABLE = '[[input]]\nname = "TAG"\ndtype = "BYTES"\ndims = [1]\n'
OUTPUT_TABLES = (
    '[[output]]\nname = "SCORES"\ndtype = "FP32"\ndims = [2]\n\n'
    '[[output]]\nname = "LABEL"\ndtype = "BYTES"\ndims = [1]\n'
)
PRE = f'function = "{PACKAGE}.steps:preprocess"'
POST = f'function = "{PACKAGE}.steps:postprocess"'
BUILD = f'build = "{PACKAGE}.model:build"'
SAMPLES = f'function = "{PACKAGE}.samples:samples"'
STEP = 'step = "tritonrepo.image.steps:PostprocessStep"'  # a PythonStep class that imports
IMPORT_FIX = "the module must be importable from the checkout root"

CASES = [
    # --- found by a first-time user ---------------------------------------------------------
    Case("samples-too-few", sub(SAMPLES, SAMPLES.replace(":samples", ":four_samples")),
         "samples.function", ("returns [4] rows; give at least 8",), False),
    Case("preprocess-crashes", sub(PRE, PRE.replace(":preprocess", ":preprocess_crashing")),
         "preprocess.function",
         ("failed on the samples at tests/unit/pipeline_fixtures/toy/steps.py:", "UFuncTypeError"),
         False),
    Case("postprocess-flat-output", sub(POST, POST.replace(":postprocess", ":postprocess_flat")),
         "postprocess.function", ("return it as [batch, 1]: LABEL.reshape(-1, 1)",), False),
    # --- structure (load) ---------------------------------------------------------------
    Case("unknown-top-field", sub("max_batch_size = 8", "max_batch = 8"), "max_batch",
         ("unknown field (did you mean 'max_batch_size'?)", "known: name, summary"), True),
    Case("unknown-step-field", sub(PRE, PRE.replace("function", "fuction")), "preprocess.fuction",
         ("unknown field (did you mean 'function'?)",), True),
    Case("unknown-tensor-field", sub(X_TABLE, X_TABLE + 'dtyp = "FP32"\n'), "input[0].dtyp",
         ("unknown field (did you mean 'dtype'?)", "known: name, dtype, dims"), True),
    Case("unknown-model-field", sub(BUILD, BUILD + "\nfixed_dim = { features = [4] }"),
         "model.fixed_dim", ("did you mean 'fixed_dims'?",), True),
    Case("bad-dtype", sub(X_TABLE, X_TABLE.replace("FP32", "FLOAT32")), "input[0].dtype",
         ("'FLOAT32' is not a Triton data type", "one of " + ", ".join(DTYPES)), True),
    Case("bad-dtype-lowercase", sub(TAG_TABLE, TAG_TABLE.replace("BYTES", "bytes")),
         "input[1].dtype", ("'bytes' is not a Triton data type", "BYTES"), True),
    Case("dims-zero", sub(X_TABLE, X_TABLE.replace("[4]", "[0]")), "input[0].dims",
         ("[0]: give a non-empty list of sizes > 0 or -1 (any)",), True),
    Case("dims-empty", sub(X_TABLE, X_TABLE.replace("[4]", "[]")), "input[0].dims",
         ("[]: give a non-empty list of sizes > 0 or -1",), True),
    Case("dims-below-minus-one", sub(X_TABLE, X_TABLE.replace("[4]", "[4, -2]")),
         "input[0].dims", ("[4, -2]: give a non-empty list",), True),
    Case("dims-not-integers", sub(X_TABLE, X_TABLE.replace("[4]", '["4"]')), "input[0].dims",
         ("['4']: give a non-empty list",), True),
    Case("dims-not-a-list", sub(X_TABLE, X_TABLE.replace("[4]", "4")), "input[0].dims",
         ("must be a list, got 4",), True),
    Case("dims-missing", sub(X_TABLE, X_TABLE.replace("dims = [4]\n", "")), "input[0].dims",
         ("is missing; give the dims without the batch dim, e.g. [3]",), True),
    Case("extra-output-dims", sub('dims = [1] }]', 'dims = [0] }]'), "preprocess.outputs[0].dims",
         ("[0]: give a non-empty list",), True),
    Case("no-input", sub(X_TABLE + "\n" + TAG_TABLE, ""), "input",
         ("no request tensors; add [[input]] tables (name, dtype, dims)",), True),
    Case("no-output", sub(OUTPUT_TABLES, ""), "output",
         ("no response tensors; add [[output]] tables (name, dtype, dims)",), True),
    Case("input-twice", sub(TAG_TABLE, TAG_TABLE.replace('"TAG"', '"X"')), "input",
         ("tensor 'X' is declared twice; give each tensor once",), True),
    Case("sequence-unknown-field", lambda t: t + '\n[sequence]\ncontrol = "START"\n',
         "sequence.control", ("unknown field", "did you mean 'controls'"), True),
    Case("sequence-no-idle-timeout", lambda t: t + "\n[sequence]\nmax_sessions = 5\n",
         "sequence.idle_timeout_s", ("is missing", "Triton's own default, 1 s"), True),
    Case("sequence-bad-id-kind", lambda t: t + '\n[sequence]\nidle_timeout_s = 60\n'
         'correlation_id = "int"\n', "sequence.correlation_id", ("128 bytes", "0 means"), True),
    Case("sequence-corrid-with-strings", lambda t: t + "\n[sequence]\nidle_timeout_s = 60\n"
         '[sequence.controls]\ncorrid = "CORRID"\n', "sequence.controls.corrid",
         ("breaks string correlation IDs", "correlation_id = 'uint64'"), True),
    Case("sequence-with-preprocess", lambda t: t + "\n[sequence]\nidle_timeout_s = 60\n",
         "preprocess", ("has no preprocess model", "[session] step"), True),
    Case("session-without-sequence", lambda t: t + '\n[session]\nstep = "a.b:c"\n', "session",
         ("needs a [sequence] table",), True),
    Case("builder-without-io", sub(BUILD, 'builder = "builders.onnx_export.image"'), "model",
         ("a builder core declares its I/O", "add [[model.input]] and [[model.output]] tables"),
         True),
    Case("two-model-sources", sub(BUILD, BUILD + '\nonnx = "x.onnx"'), "model",
         ("give exactly one of onnx", "(got onnx, build)"), True),
    # --- calls: models a step class calls through BLS --------------------------------------
    Case("calls-from-a-function", sub(PRE, PRE + '\ncalls = ["other_model"]'),
         "preprocess.calls", ("a function step calls models in a multi-model description",
                              "[models.<key>]", "step = 'module:Class'"),
         True),
    Case("calls-itself", sub(POST, f'{STEP}\ncalls = ["toy_postprocess"]'), "postprocess.calls",
         ("'toy_postprocess' is its own model", "call another model"), True),
    Case("calls-its-pipeline", sub(POST, f'{STEP}\ncalls = ["toy"]'), "postprocess.calls",
         ("'toy' is its own pipeline",), True),
    Case("calls-not-a-list", sub(POST, f'{STEP}\ncalls = "other_model"'), "postprocess.calls",
         ("must be a list",), True),
    Case("calls-twice", sub(POST, f'{STEP}\ncalls = ["other_model", "other_model"]'),
         "postprocess.calls", ("listed twice",), True),
    Case("calls-unknown-model", sub(POST, f'{STEP}\ncalls = ["other_modle"]'),
         "postprocess.calls", ("no model 'other_modle'", "did you mean 'other_model'?"), False),
    Case("bad-function-ref", sub(PRE, 'function = "steps.preprocess"'), "preprocess.function",
         ("'steps.preprocess' is not 'package.module:function'",), True),
    Case("no-samples", sub(f"\n[samples]\n{SAMPLES}\n", ""), "samples",
         ("is missing; add [samples] function = 'module:function'",), True),
    # --- imports (check) ----------------------------------------------------------------
    Case("preprocess-module-missing", sub(PRE, PRE.replace(".steps:", ".nowhere:")),
         "preprocess.function",
         (f"cannot import '{PACKAGE}.nowhere:preprocess'", "No module named", IMPORT_FIX), False),
    Case("preprocess-attribute-missing", sub(PRE, PRE.replace(":preprocess", ":nothing")),
         "preprocess.function",
         (f"module '{PACKAGE}.steps' has no attribute 'nothing'", "its functions: postprocess,"),
         False),
    Case("postprocess-attribute-missing", sub(POST, POST.replace(":postprocess", ":post")),
         "postprocess.function",
         ("has no attribute 'post'", "its functions: postprocess, "), False),
    Case("samples-module-missing", sub(SAMPLES, SAMPLES.replace(".samples:", ".nosuch:")),
         "samples.function", ("No module named", IMPORT_FIX), False),
    Case("build-attribute-missing", sub(BUILD, BUILD.replace(":build", ":make")), "model.build",
         ("has no attribute 'make'", "its functions: build, build_batch_mixing"), False),
    # --- tensors in neither the graph nor the functions' outputs (check) -----------------
    Case("postprocess-misses-output", sub(POST, POST.replace(":postprocess",
                                                             ":postprocess_without_label")),
         "postprocess.function",
         ("tensor 'LABEL' (the response tensor) exists in neither the ONNX graph's outputs nor "
          "postprocess's outputs; return it from the function (got ['SCORES'])",), False),
    Case("preprocess-misses-core-input", sub(PRE, PRE.replace(":preprocess",
                                                              ":preprocess_without_features")),
         "preprocess.function",
         ("does not return 'features', the core model's input; return it from the "
          "function (got ['TAG_LENGTH'])",), False),
    Case("preprocess-misses-declared-extra",
         sub('dims = [1] }]', 'dims = [1] }, { name = "MASK", dtype = "BOOL", dims = [1] }]'),
         "preprocess.function", ("tensor 'MASK'", "exists in neither", "return it"), False),
    Case("preprocess-returns-undeclared", sub(PRE, PRE.replace(":preprocess",
                                                               ":preprocess_with_extra")),
         "preprocess.function",
         ("returns ['UNDECLARED']", "declare them under preprocess.outputs"), False),
    # --- dtypes and dims (check) ---------------------------------------------------------
    Case("preprocess-float64", sub(PRE, PRE.replace(":preprocess", ":preprocess_float64")),
         "preprocess.function",
         ("dtype mismatch: 'features' is float64, the core model's input is FP32; cast it in the "
          "function (astype(np.float32))",), False),
    Case("response-dtype",
         sub('name = "SCORES"\ndtype = "FP32"', 'name = "SCORES"\ndtype = "FP16"'),
         "postprocess.function",
         ("dtype mismatch: 'SCORES' is float32, the response tensor is FP16",
          "astype(np.float16)"), False),
    Case("response-shape", sub('name = "SCORES"\ndtype = "FP32"\ndims = [2]',
                               'name = "SCORES"\ndtype = "FP32"\ndims = [3]'),
         "postprocess.function",
         ("'SCORES' has shape [8, 2], the response tensor is [batch, 3]", "batch-first"), False),
    Case("dynamic-non-batch-dim", sub(BUILD, BUILD.replace(":build", ":build_dynamic")), "model",
         ("graph input 'features' has dynamic dims [-1] besides the batch dim",
          "fixed_dims = { features = [...] }", "same_shape_batches = true"), False),
    Case("fixed-dims-unknown-input",
         sub(BUILD, BUILD.replace(":build", ":build_dynamic") + "\nfixed_dims = { pixels = [4] }"),
         "model.fixed_dims.pixels", ("the graph has no input 'pixels'; inputs: ['features']",),
         False),
    Case("fixed-dims-wrong-rank",
         sub(BUILD, BUILD.replace(":build", ":build_dynamic")
             + "\nfixed_dims = { features = [2, 2] }"),
         "model.fixed_dims.features", ("[2, 2] does not fit the graph's dims [-1]", "give 1 sizes"),
         False),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_description_is_refused_naming_field_and_fix(ws: Workspace, case: Case):
    ws.write_description(case.edit(TOY_TOML))
    if case.structural:
        with pytest.raises(DescriptionError) as info:
            load(ws.description)
        problems = info.value.problems
    else:
        ws.load()  # structurally fine: the checks find it
        problems = problems_of(ws)
    problem = find(problems, ws.description, case.field, *case.fragments)  # field and fix

    before = ws.snapshot()
    result = ws.run()
    assert result.rc == 1
    assert f"error: {problem}" in result.err.splitlines()
    assert "written" not in result.out
    assert ws.snapshot() == before  # nothing written: no model folder, manifest or tests module
    assert not ws.manifest.exists() and not ws.tests_module.exists()
    assert ws.files() == {"other_model/config.pbtxt"}


def test_the_unedited_toy_description_passes(ws: Workspace):
    """The control of the cases above: without an edit, load and plan succeed."""
    pipeline = ws.load()
    assert pipeline.models == ("toy", "toy_preprocess", "toy_model", "toy_postprocess")
    assert [t.name for t in pipeline.preprocess.outputs] == ["TAG_LENGTH"]
    changes = generate.plan(pipeline, ws.repository)
    assert {c.action for c in changes} == {"create"}


def test_an_output_shape_other_than_the_declared_one_is_named_without_runtime_noise(
    ws: Workspace, capfd: pytest.CaptureFixture[str]
):
    """A graph that computes another shape than it declares (the configs are made from the
    declared one) is refused naming the output and both shapes; ONNX Runtime's own warnings
    about it (shape merge, VerifyOutputSizes) are not printed among the generator's lines."""
    ws.write_description(edited(TOY_TOML, BUILD, BUILD.replace(":build", ":build_misdeclared")))
    result = ws.run()
    assert result.rc == 1
    find(
        [line.removeprefix("error: ") for line in result.err.splitlines()],
        ws.description,
        "model",
        "output 'scores' has shape [8, 2] on the samples, but the graph declares [N, 3]",
    )
    assert "onnxruntime" not in capfd.readouterr().err


def test_every_problem_is_reported_at_once(ws: Workspace):
    text = edited(TOY_TOML, X_TABLE, X_TABLE.replace("FP32", "FP31").replace("[4]", "[0]"))
    ws.write_description(edited(text, "max_batch_size = 8", "max_batch_size = 0"))
    with pytest.raises(DescriptionError) as info:
        ws.load()
    problems = info.value.problems
    find(problems, ws.description, "input[0].dtype", "'FP31'")
    find(problems, ws.description, "input[0].dims", "[0]")
    find(problems, ws.description, "max_batch_size", "0: give 1 or more")
    assert len(problems) == 3, problems


def test_wrong_types_name_the_expected_type(ws: Workspace):
    ws.write_description(
        edited(
            edited(TOY_TOML, "max_batch_size = 8", 'max_batch_size = "8"'),
            'name = "toy"',
            'name = "Toy Pipeline"',
        )
    )
    with pytest.raises(DescriptionError) as info:
        ws.load()
    find(info.value.problems, ws.description, "max_batch_size", "must be an integer, got '8'")
    find(info.value.problems, ws.description, "name", "'Toy Pipeline': give a lower-case name")


def test_missing_file_and_bad_toml(tmp_path: Path):
    with pytest.raises(DescriptionError, match="no such file; write pipelines/<name>/pipeline"):
        load(tmp_path / "pipeline.toml")
    (tmp_path / "pipeline.toml").write_text('name = "toy\n')
    with pytest.raises(DescriptionError, match="not valid TOML"):
        load(tmp_path / "pipeline.toml")


def test_name_clash_with_existing_model_is_refused_and_force_allows_it(ws: Workspace):
    hand_written = 'name: "toy_model"\nbackend: "python"\nmax_batch_size: 1\n'
    (ws.repository / "toy_model").mkdir()
    (ws.repository / "toy_model" / "config.pbtxt").write_text(hand_written)
    problem = find(
        problems_of(ws), ws.description, "model.model",
        "'toy_model' clashes with an existing model in model_repository/",
        "set model.model = '<another name>', or pick another name (--force writes this "
        "description's files into that folder, over those of the same name; its other files "
        "stay)",
    )  # fmt: skip
    assert sum("clashes" in p for p in problems_of(ws)) == 1  # the other three are free

    before = ws.snapshot()
    result = ws.run()
    assert (result.rc, result.err.strip()) == (1, f"error: {problem}")
    assert ws.snapshot() == before

    result = ws.run("--force")
    assert result.rc == 0, result.err
    cfg = text_format.Parse(
        (ws.repository / "toy_model/config.pbtxt").read_text(), mc.ModelConfig()
    )
    assert (cfg.name, cfg.platform) == ("toy_model", "tensorrt_plan")
    assert (ws.repository / "toy_model/configs/cpu.pbtxt").is_file()
    assert ws.manifest.is_file()


def test_a_folder_with_only_built_files_is_no_clash(ws: Workspace):
    """A model folder without a config (a builder's output, written before generating) is
    not a model yet: the generator writes its configs there and keeps the built file."""
    built = ws.repository / "toy_model" / "1" / "model.onnx"
    built.parent.mkdir(parents=True)
    built.write_bytes(b"built before")
    result = ws.run()
    assert result.rc == 0, result.err
    assert built.read_bytes() == b"built before"


def test_a_renamed_step_model_clashes_under_its_own_field(ws: Workspace):
    ws.edit_description(PRE, f'model = "other_model"\n{PRE}')
    find(problems_of(ws), ws.description, "preprocess.model",
         "'other_model' clashes with an existing model")  # fmt: skip


def test_models_must_have_distinct_names(ws: Workspace):
    ws.edit_description(BUILD, f'model = "toy_preprocess"\n{BUILD}')
    with pytest.raises(DescriptionError) as info:
        ws.load()
    find(info.value.problems, ws.description, "model", "the models' names must differ")


@pytest.mark.parametrize(
    ("extra", "dims"),
    [("fixed_dims = { features = [4] }", [4]), ("same_shape_batches = true", [-1])],
    ids=["fixed_dims", "same_shape_batches"],
)
def test_dynamic_dims_pass_with_either_fix(ws: Workspace, extra: str, dims: list[int]):
    ws.edit_description(BUILD, f'build = "{PACKAGE}.model:build_dynamic"\n{extra}')
    changes = {c.path: c for c in generate.plan(ws.load(), ws.repository)}
    text = changes["model_repository/toy_model/configs/cpu.pbtxt"].text
    cfg = text_format.Parse(text, mc.ModelConfig())
    assert [(t.name, list(t.dims)) for t in cfg.input] == [("features", dims)]


def test_parse_rejects_non_table_sections(tmp_path: Path):
    data = {
        "name": "toy",
        "input": {"name": "X"},
        "output": [{"name": "Y", "dtype": "FP32", "dims": [1]}],
        "preprocess": "f",
        "model": {"onnx": "m.onnx"},
        "postprocess": {"function": "a.b:c"},
        "tests": False,
    }
    with pytest.raises(DescriptionError) as info:
        parse(data, tmp_path / "pipeline.toml")
    source = tmp_path / "pipeline.toml"
    find(info.value.problems, source, "input", "must be a list of tensor tables")
    find(info.value.problems, source, "preprocess", "is missing; add a [preprocess] table")


def test_a_torch_gpu_set_needs_a_torch_module(tmp_path):
    """``[model.torch_gpu]`` on a core given as an ``onnx`` file: refused, since there is no
    torch module to export ``model.pt2`` from; the same table on a ``build`` core (whose
    function returns the module) and on a ``builder`` core (image_classification) loads."""
    from tritonrepo.paths import PIPELINES

    text = (PIPELINES / "breast_cancer" / "pipeline.toml").read_text()
    with_set = text.replace("[postprocess]", "[model.torch_gpu]\ninstances = 2\n\n[postprocess]")
    path = tmp_path / "pipeline.toml"
    path.write_text(
        with_set.replace('build = "pipelines.breast_cancer.model:build"', 'onnx = "core.onnx"')
    )
    with pytest.raises(DescriptionError) as caught:
        load(path)
    assert len(caught.value.problems) == 1
    assert (
        "model.torch_gpu: a torch.export program (model.pt2) is exported from a torch module"
        in (caught.value.problems[0])
    )
    path.write_text(with_set)
    assert load(path).core.deployments["torch_gpu"].instances == 2
    shipped = load(PIPELINES / "image_classification" / "pipeline.toml")
    assert shipped.core.deployments["torch_gpu"].instances == 2


@pytest.mark.parametrize(
    ("pipeline", "reason"),
    [
        ("breast_cancer", "its core has no torch_gpu set"),
        ("ctr_ranking", "max_batch_size = 0: one request per execute"),
    ],
)
def test_one_step_gpu_is_refused_where_it_cannot_run(tmp_path, pipeline, reason):
    """``one_step_gpu = true`` needs a batching, stateless pipeline whose core has a torch_gpu
    program; elsewhere the description names why (text_embedding, which has it, loads)."""
    from tritonrepo.paths import PIPELINES

    text = (PIPELINES / pipeline / "pipeline.toml").read_text()
    path = tmp_path / "pipeline.toml"
    path.write_text("one_step_gpu = true\n" + text)  # a top-level key: before any table
    with pytest.raises(DescriptionError) as caught:
        load(path)
    assert [p for p in caught.value.problems if ": one_step_gpu: " in p] == [
        next(p for p in caught.value.problems if reason in p)
    ]
    assert load(PIPELINES / "text_embedding" / "pipeline.toml").one_step_gpu


def test_openai_embeddings_names_a_text_input_and_a_vector_output(tmp_path):
    """``openai_embeddings``: text_embedding's loads (and its served configs carry it); a
    declaration naming tensors of the wrong kind is refused, each with what it must name."""
    import json

    from tritonrepo.paths import PIPELINES
    from tritonrepo_format.roles import OPENAI_EMBEDDINGS_PARAMETER

    shipped = load(PIPELINES / "text_embedding" / "pipeline.toml")
    parameter = json.loads(shipped.openai_parameter()[OPENAI_EMBEDDINGS_PARAMETER])
    assert parameter == {"input": "TEXT", "output": "EMBEDDING", "tokens": "TOKENS",
                         "dimensions": 384}  # fmt: skip
    text = (PIPELINES / "breast_cancer" / "pipeline.toml").read_text()
    path = tmp_path / "pipeline.toml"
    path.write_text(
        'openai_embeddings = { input = "MEASUREMENTS", output = "DIAGNOSIS", tokens = "X" }\n'
        + text
    )
    with pytest.raises(DescriptionError) as caught:
        load(path)
    problems = caught.value.problems
    assert len(problems) == 3
    find(problems, path, "openai_embeddings.input", "a BYTES [1] input (one text)")
    find(problems, path, "openai_embeddings.output", "an FP32 [d] output (the embedding)")
    find(problems, path, "openai_embeddings.tokens", "an INT32 or INT64 [1] output")
