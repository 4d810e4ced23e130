"""The BLS calls a model declares (config parameter ``tritonrepo_calls``) and what must be
loaded with a served model (:mod:`tritonrepo_client.control.model_calls`), on small
repositories of configs written here and on the shipped one (ctr_session calls ctr_model)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.server import preflight
from tritonrepo.server.options import ServerOptions
from tritonrepo_client.control.model_calls import (
    callers,
    declared_calls,
    disk_configs,
    load_closure,
    parse_calls,
    used_models,
)


def calls(names: str) -> str:
    return f'parameters {{ key: "tritonrepo_calls" value {{ string_value: "{names}" }} }}\n'


def ensemble(*steps: str) -> str:
    body = ", ".join(f'{{ model_name: "{s}" model_version: -1 }}' for s in steps)
    return f'platform: "ensemble"\nensemble_scheduling {{ step [ {body} ] }}\n'


PYTHON = 'backend: "python"\n'


def write(root: Path, configs: dict[str, str]) -> Path:
    for path, text in configs.items():
        file = root / path
        file.parent.mkdir(parents=True, exist_ok=True)
        name = path.split("/")[0]
        file.write_text(f'name: "{name}"\n{text}')
    return root


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """ocr (ensemble: ocr_pre, ocr_post); ocr_post calls rec (ensemble: rec_pre, rec_model) and
    lang; rec_pre calls lang; lang calls nothing; loop_a and loop_b call each other; cpu_only
    declares its call in configs/cpu.pbtxt only."""
    return write(
        tmp_path,
        {
            "ocr/config.pbtxt": ensemble("ocr_pre", "ocr_post"),
            "ocr_pre/config.pbtxt": PYTHON,
            "ocr_post/config.pbtxt": PYTHON + calls("rec, lang"),
            "rec/config.pbtxt": ensemble("rec_pre", "rec_model"),
            "rec_pre/config.pbtxt": PYTHON + calls("lang"),
            "rec_model/config.pbtxt": 'backend: "onnxruntime"\n',
            "lang/config.pbtxt": PYTHON,
            "loop_a/config.pbtxt": PYTHON + calls("loop_b"),
            "loop_b/config.pbtxt": PYTHON + calls("loop_a"),
            "cpu_only/config.pbtxt": PYTHON,
            "cpu_only/configs/cpu.pbtxt": PYTHON + calls("lang"),
        },
    )


def test_parse_calls_drops_blanks_and_repeats_and_keeps_the_order():
    assert parse_calls(" b, a,,b ,") == ("b", "a")
    assert parse_calls("") == ()


def test_declared_calls_read_from_triton_json():
    config = {"parameters": {"tritonrepo_calls": {"string_value": "ctr_model"}}}
    assert declared_calls(config) == ("ctr_model",)
    assert declared_calls({"parameters": {"other": {"string_value": "x"}}}) == ()
    assert declared_calls({}) == ()


def test_closure_follows_steps_and_calls_and_puts_each_callee_before_its_caller(repo: Path):
    read = disk_configs(repo)
    # ocr's step ocr_post calls rec and lang; rec's step rec_pre calls lang too.
    assert load_closure(["ocr"], read) == ("lang", "rec")
    assert load_closure(["rec"], read) == ("lang",)
    assert load_closure(["ocr_pre"], read) == ()
    # What is served already is not listed again.
    assert load_closure(["ocr", "lang"], read) == ("rec",)


def test_closure_ends_on_a_cycle_and_ignores_unknown_models(repo: Path):
    read = disk_configs(repo)
    assert load_closure(["loop_a"], read) == ("loop_b",)
    assert load_closure(["no_such_model"], read) == ()


def test_closure_resolves_the_config_set_as_triton_does(repo: Path):
    assert load_closure(["cpu_only"], disk_configs(repo)) == ()
    assert load_closure(["cpu_only"], disk_configs(repo, "cpu")) == ("lang",)
    assert load_closure(["cpu_only"], disk_configs(repo, "torch_gpu")) == ()  # no such set


def test_used_models_and_callers(repo: Path):
    read = disk_configs(repo)
    assert used_models(["ocr"], read) == {"ocr_pre", "ocr_post", "rec", "rec_pre", "rec_model",
                                          "lang"}  # fmt: skip
    assert callers("lang", ["ocr", "rec", "rec_model", "lang"], read) == ("ocr", "rec")


def test_shipped_ctr_session_calls_ctr_model_where_it_runs_the_python_step():
    # configs/cpu.pbtxt and configs/torch_gpu.pbtxt run CtrSessionStep, which calls ctr_model;
    # config.pbtxt is a TensorRT plan holding ctr_model's network itself.
    for config_name in ("cpu", "torch_gpu"):
        read = disk_configs(MODEL_REPOSITORY, config_name)
        assert load_closure(["ctr_session"], read) == ("ctr_model",)
    assert load_closure(["ctr_session"], disk_configs(MODEL_REPOSITORY)) == ()


def test_the_launcher_loads_what_a_served_model_calls(repo: Path):
    options = ServerOptions(model_repository=repo, models=("ocr",), model_config_name=None)
    assert options.load_models == ("lang", "rec", "ocr")
    shipped = ServerOptions(models=("ctr_session",), model_config_name="cpu")
    assert shipped.load_models == ("ctr_model", "ctr_session")


def test_preflight_checks_the_called_models_too(repo: Path):
    assert set(preflight.dependencies(repo, ["ocr"], None)) == {"ocr", *used_models(["ocr"],
                                                                disk_configs(repo))}  # fmt: skip
