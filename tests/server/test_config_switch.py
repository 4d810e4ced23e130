"""The CPU fallback: ``tritonrepo-client configs use SET`` switches a running server
between config sets through the load API, under load, without a failed request.

The server here serves the CPU set, and this machine has no GPU and no TensorRT, so the GPU
sets cannot load. The tests therefore (1) switch to a second CPU set written for the test
(``alt``: the CPU configs with one instance and a marker parameter) and back to ``cpu``, under
load; (2) switch to ``default`` (the TensorRT plans), whose loads fail here: the switch is undone
and the CPU configs keep serving; (3) ask for ``torch_gpu``, whose FP16 tensors between encoder
and pool change the interface: refused before anything loads. Every answer under load is
checked against the answers from before.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import client_cli, key_file
from tests.server.test_faults import TEXTS as FAULT_TEXTS
from tests.server.test_faults import Load, embedding_call, matches
from tests.server.test_faults import embed as embed_once
from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo_client import RankingClient, RepositoryClient, TritonConnection, rollback
from tritonrepo_client.control.config_sets import (
    CONFIG_SET_PARAMETER,
    ConfigSwitchError,
    interface_change,
    switch_config_set,
    target_config,
)
from tritonrepo_client.control.rollout import previous_version, rollout
from tritonrepo_format.config_sets import config_path
from tritonrepo_format.configs import load_config

# The models of the switch: text_embedding's steps and the CTR models (the image models are
# left out of the test's repository folder, so the command leaves them alone).
MODELS = (
    "text_embedding",
    "text_embedding_tokenize",
    "text_embedding_encoder",
    "text_embedding_normalize",
    "ctr_ranking",
    "ctr_preprocess",
    "ctr_model",
    "ctr_postprocess",
    "ctr_session",
)
SERVED = ("text_embedding", "ctr_ranking", "ctr_session")
CONTROL_SERVER_MODELS = SERVED  # what the switch covers (not the image models)
HISTORY, CANDIDATES = [12, 7, 981, 4000, 5], [5, 66, 981, 4000, 17, 250, 3, 9000]


def config_copy(tmp_path: Path) -> Path:
    """The configs of MODELS (no artifacts: the server has them) plus an ``alt`` set: a copy
    of every ``cpu.pbtxt``, with the instance counts of the two core models swapped; and a
    ``half`` set whose encoder declares its output FP16 (an interface change)."""
    root = tmp_path / "repository"
    for model in MODELS:
        source, target = MODEL_REPOSITORY / model, root / model
        target.mkdir(parents=True)
        shutil.copy(source / "config.pbtxt", target)
        if (source / "configs").is_dir():
            shutil.copytree(source / "configs", target / "configs")
    for cpu_file in root.glob("*/configs/cpu.pbtxt"):
        alt = cpu_file.read_text()
        model = cpu_file.parent.parent.name
        if model == "text_embedding_encoder":
            alt = alt.replace("count: 2 kind: KIND_CPU", "count: 1 kind: KIND_CPU")
        elif model == "ctr_model":
            alt = alt.replace("count: 1 kind: KIND_CPU", "count: 2 kind: KIND_CPU")
        (cpu_file.parent / "alt.pbtxt").write_text(alt)
    encoder = root / "text_embedding_encoder" / "configs"
    half = (encoder / "cpu.pbtxt").read_text()
    fp32 = 'name: "sentence_embedding" data_type: TYPE_FP32'
    assert fp32 in half
    (encoder / "half.pbtxt").write_text(half.replace(fp32, fp32.replace("FP32", "FP16")))
    return root


def configs(server, tmp_path: Path, *args: str):
    """``tritonrepo-client configs ARGS`` against ``server``, reading the test's repository."""
    repository = tmp_path / "repository"
    if not repository.exists():
        config_copy(tmp_path)
    key = key_file(server, tmp_path)
    return client_cli(
        "--url", server.options.http_url, "--repository-key-file", str(key),
        "configs", *args, "--repository", str(repository),
    )  # fmt: skip


def ranking_call(server, expected):
    def call(protocol: str) -> None:
        with RankingClient(server.options.url(protocol), protocol, timeout_s=30) as client:
            got = client.rank(HISTORY, CANDIDATES, top_k=3)
        if got.item_ids.tolist() != expected:
            raise AssertionError(f"ranking changed: {got.item_ids.tolist()} != {expected}")

    return call


@pytest.fixture(scope="module")
def before(control_server):
    with RankingClient(control_server.options.http_url) as client:
        ranking = client.rank(HISTORY, CANDIDATES, top_k=3).item_ids.tolist()
    return embed_once(control_server, FAULT_TEXTS), ranking


def served_sets(server) -> dict[str, str]:
    options = server.options
    with RepositoryClient(options.http_url, "http", key=options.repository_key) as repo:
        out = {}
        for model in ("text_embedding_encoder", "ctr_model", "text_embedding_tokenize"):
            config = repo.config(model)
            marker = config.get("parameters", {}).get(CONFIG_SET_PARAMETER, {})
            out[model] = (
                marker.get("string_value", "as started"),
                config["instance_group"][0]["count"],
            )
    return out


@pytest.mark.server
def test_switch_to_another_set_and_back_under_load_drops_nothing(control_server, before, tmp_path):
    embeddings, ranking = before
    calls = (embedding_call(control_server, embeddings), ranking_call(control_server, ranking))
    with Load(lambda p: [c(p) for c in calls]) as load:
        there = configs(control_server, tmp_path, "use", "alt")
        sets_there = served_sets(control_server)
        back = configs(control_server, tmp_path, "use", "cpu")
    assert there.returncode == 0, there.stderr
    assert back.returncode == 0, back.stderr
    assert sets_there["text_embedding_encoder"] == ("alt", 1)
    assert sets_there["ctr_model"] == ("alt", 2)
    assert sets_there["text_embedding_tokenize"][0] == "alt"  # no alt.pbtxt: config.pbtxt
    sets_back = served_sets(control_server)
    assert sets_back["text_embedding_encoder"] == ("cpu", 2)
    assert not load.failures(), load.failures()[:3]
    assert len(load.outcomes) >= 8, "the load did not run during the switch"
    print(there.stdout, back.stdout, f"{len(load.outcomes)} requests, 0 failed", sep="\n")
    assert matches(embed_once(control_server, FAULT_TEXTS), embeddings)


@pytest.mark.server
def test_a_set_that_cannot_load_here_is_undone_and_nothing_is_dropped(
    control_server, before, tmp_path
):
    embeddings, ranking = before
    sets_before = served_sets(control_server)
    calls = (embedding_call(control_server, embeddings), ranking_call(control_server, ranking))
    with Load(lambda p: [c(p) for c in calls]) as load:
        result = configs(control_server, tmp_path, "use", "default")
    assert result.returncode == 1, result.stdout
    assert "failed" in result.stderr and "the previous configs serve again" in result.stderr, (
        result.stderr
    )
    assert served_sets(control_server) == sets_before
    assert not load.failures(), load.failures()[:3]
    assert control_server.check_health(SERVED)[0].ok


@pytest.mark.server
def test_a_set_that_changes_an_interface_is_refused_before_loading(control_server, tmp_path):
    sets_before = served_sets(control_server)
    result = configs(control_server, tmp_path, "use", "half")
    assert result.returncode == 1
    assert "changes the model's interface" in result.stderr, result.stderr
    assert "TYPE_FP16" in result.stderr and "nothing was switched" in result.stderr
    assert served_sets(control_server) == sets_before


def test_config_path_falls_back_to_config_pbtxt_and_keeps_the_serving_versions() -> None:
    encoder = "text_embedding_encoder"
    assert config_path(MODEL_REPOSITORY, encoder, "cpu").name == "cpu.pbtxt"
    assert config_path(MODEL_REPOSITORY, encoder, "default").name == "config.pbtxt"
    assert config_path(MODEL_REPOSITORY, "text_embedding_tokenize", "cpu").name == "config.pbtxt"
    serving = {"version_policy": {"specific": {"versions": ["4"]}}}
    target, path = target_config(MODEL_REPOSITORY, encoder, "cpu", serving)
    assert path.name == "cpu.pbtxt"
    assert target["version_policy"] == serving["version_policy"]
    assert target["parameters"][CONFIG_SET_PARAMETER] == {"string_value": "cpu"}
    assert target["backend"] == load_config(path).backend


def test_interface_change_names_the_tensor() -> None:
    cpu, _ = target_config(MODEL_REPOSITORY, "text_embedding_encoder", "cpu", {})
    gpu, _ = target_config(MODEL_REPOSITORY, "text_embedding_encoder", "torch_gpu", {})
    trt, _ = target_config(MODEL_REPOSITORY, "text_embedding_encoder", "default", {})
    assert interface_change(cpu, trt) is None
    assert interface_change(cpu, gpu) is None  # every set hands on FP32 sentence embeddings
    half = copy.deepcopy(gpu)
    half["output"][0]["data_type"] = "TYPE_FP16"
    change = interface_change(cpu, half)
    assert change is not None and "sentence_embedding" in change and "TYPE_FP16" in change
    assert json.loads(json.dumps(cpu)) == cpu  # a load-API override is sent as JSON


def test_a_set_no_model_has_is_refused_before_anything_is_sent() -> None:
    with pytest.raises(ConfigSwitchError, match=r"no config set 'cpuu'.*\(sets: default, cpu, "):
        switch_config_set(None, None, MODEL_REPOSITORY, "cpuu", [])  # type: ignore[arg-type]


@pytest.mark.server
def test_cpu_fallback_after_a_rollback_loads_no_rolled_back_version(control_server, tmp_path):
    """rollout 1 -> 2, rollback, then ``configs use cpu``: only version 1 may serve afterwards.
    After the rollback ``get_model_config`` still reports the policy [1, 2] (Triton keeps
    version 1 with the config of the rollback's staging load), so a fallback that copied the
    reported policy loaded version 2 again, and the ensembles (``model_version: -1``) served
    it. The rollout record survives the switch, so a later rollback still knows version 2."""
    options = control_server.options
    rolled = ("text_embedding_encoder", "ctr_model")
    with RepositoryClient(options.http_url, "http", key=options.repository_key) as repo:
        for model in rolled:
            rollout(repo, model, 2)
            rollback(repo, model)
            assert repo.versions(model) == [1]
        reported = {m: repo.config(m).get("version_policy") for m in rolled}
        print("policies reported after the rollbacks:", reported)
        result = configs(control_server, tmp_path, "use", "cpu")
        assert result.returncode == 0, result.stdout + result.stderr
        for model in rolled:
            states = ("READY", "LOADING", "UNLOADING")
            assert repo.versions(model, states) == [1], (model, result.stdout)
            assert repo.config(model)["parameters"][CONFIG_SET_PARAMETER]["string_value"] == "cpu"
            assert previous_version(repo, model) == 2
    with TritonConnection(options.http_url) as conn:
        assert [conn.model_versions(m) for m in rolled] == [["1"], ["1"]]
        assert control_server.check_health()[1].ok


def test_the_target_policy_names_the_ready_versions_not_the_reported_one() -> None:
    serving = {
        "version_policy": {"specific": {"versions": ["1", "2"]}},  # stale, as after a rollback
        "parameters": {"tritonrepo.previous_version": {"string_value": "2"}},
    }
    target, _ = target_config(MODEL_REPOSITORY, "ctr_model", "cpu", serving, versions=[1])
    assert target["version_policy"] == {"specific": {"versions": [1]}}
    assert target["parameters"]["tritonrepo.previous_version"] == {"string_value": "2"}
