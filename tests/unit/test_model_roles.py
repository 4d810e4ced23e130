"""The model lists read from a repository's configs
(:mod:`tritonrepo_format.roles`): top-level models, the default serving list
and the core models, on a small repository written here and on this checkout's."""

from __future__ import annotations

from pathlib import Path

from tritonrepo.paths import MODEL_REPOSITORY, REPO_ROOT
from tritonrepo_format import roles

PROBE = 'parameters { key: "tritonrepo_probe" value { string_value: "{}" } }\n'


def _model(repository: Path, name: str, text: str, cpu: str | None = None) -> None:
    folder = repository / name
    folder.mkdir()
    (folder / "config.pbtxt").write_text(f'name: "{name}"\n{text}')
    if cpu is not None:
        (folder / "configs").mkdir()
        (folder / "configs" / "cpu.pbtxt").write_text(f'name: "{name}"\n{cpu}')


def _repository(tmp_path: Path) -> Path:
    """pipe (ensemble: pre -> net; probe declared), session (Python, calls net through BLS,
    probe declared), plain (ensemble of pre, no probe), shipped (no probe, a built-in one),
    orphan (a plan nobody uses, no probe), broken (does not parse)."""
    steps = 'ensemble_scheduling { step [ { model_name: "pre" model_version: -1 }, ' \
        '{ model_name: "net" model_version: -1 } ] }\n'  # fmt: skip
    _model(tmp_path, "pipe", 'platform: "ensemble"\n' + steps + PROBE)
    one_step = 'ensemble_scheduling { step [ { model_name: "pre" model_version: -1 } ] }\n'
    _model(tmp_path, "plain", 'platform: "ensemble"\n' + one_step)
    _model(tmp_path, "shipped", 'platform: "ensemble"\n' + one_step)
    calls = 'parameters { key: "tritonrepo_calls" value { string_value: " net, " } }\n'
    _model(tmp_path, "session", 'backend: "python"\n' + calls + PROBE)
    _model(tmp_path, "pre", 'backend: "python"\n')
    _model(tmp_path, "net", 'platform: "tensorrt_plan"\n', cpu='backend: "onnxruntime_python"\n')
    _model(tmp_path, "orphan", 'platform: "tensorrt_plan"\n')
    _model(tmp_path, "broken", "platform: 12 ]\n")
    return tmp_path


def test_top_level_models_are_those_no_step_or_call_uses(tmp_path):
    repository = _repository(tmp_path)
    assert roles.dependents(repository) == {"pre", "net"}
    assert roles.top_level_models(repository) == [
        "broken", "orphan", "pipe", "plain", "session", "shipped",
    ]  # fmt: skip


def test_served_models_are_the_top_level_ones_that_declare_a_probe(tmp_path):
    repository = _repository(tmp_path)
    assert roles.served_models(repository) == ("pipe", "session")


def test_core_models_run_a_core_runtime_in_some_set(tmp_path):
    """net: a plan in config.pbtxt, ONNX Runtime in configs/cpu.pbtxt; orphan: a plan; the
    Python models and ensembles are not core models."""
    assert roles.core_models(_repository(tmp_path)) == ("net", "orphan")


def test_the_checkout_serves_its_pipelines_and_not_their_steps():
    served = set(roles.served_models(MODEL_REPOSITORY))
    described = {p.parent.name for p in (REPO_ROOT / "pipelines").glob("*/pipeline.toml")}
    assert served == described  # every described pipeline, nothing else
    steps = {"text_embedding_tokenize", "ctr_model", "digit_stream_model", "image_preprocess"}
    assert not served & steps
    assert "image_classifier_resnet50" not in served  # a plan of its own, without a probe
