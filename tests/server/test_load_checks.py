"""``models load`` and ``rollout`` refuse locally what cannot work, when the client runs beside
the server's repository, and say what to fix (:mod:`tritonrepo_client.control.load_checks`).

One server for the module (``text_embedding`` only) on a repository of its own: links to the
real models, a copy of the normalize step (a test changes its config) and broken copies of it, which
the server never loads at start.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import client_cli, key_file, require_artifacts, server_options
from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.server.launcher import TritonServer
from tritonrepo.text import spec
from tritonrepo_client import RepositoryClient
from tritonrepo_client.control.rollout import RolloutError, rollout

pytestmark = pytest.mark.server
NO_MODEL_PY = "normalize_without_model_py"
TYPOS = {  # model -> (text replaced in the normalize step's config, replacement, protobuf's reason)
    "normalize_type_typo": (
        'name: "sentence_embedding" data_type: TYPE_FP32',
        'name: "sentence_embedding" data_type: TYPE_FP23',
        'Enum type "inference.DataType" has no value named TYPE_FP23.',
    ),
    "normalize_field_typo": (
        "max_batch_size: 64",
        "max_batch_sise: 64",
        'Message type "inference.ModelConfig" has no field named "max_batch_sise".',
    ),
}


def normalize_copy(repo: Path, name: str, keep_model_py: bool = True) -> Path:
    """A copy of the normalize step named ``name`` (its config's name too)."""
    folder = repo / name
    shutil.copytree(
        MODEL_REPOSITORY / spec.NORMALIZE_MODEL,
        folder,
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    config = folder / "config.pbtxt"
    config.write_text(
        config.read_text().replace(f'name: "{spec.NORMALIZE_MODEL}"', f'name: "{name}"')
    )
    if not keep_model_py:
        (folder / "1" / "model.py").unlink()
    return folder


@pytest.fixture(scope="module")
def repository(tmp_path_factory) -> Path:
    require_artifacts()
    repo = tmp_path_factory.mktemp("repository")
    for model in (spec.ENSEMBLE, spec.TOKENIZE_MODEL, spec.ENCODER_MODEL):
        (repo / model).symlink_to(MODEL_REPOSITORY / model, target_is_directory=True)
    shutil.copytree(
        MODEL_REPOSITORY / spec.NORMALIZE_MODEL,
        repo / spec.NORMALIZE_MODEL,
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    normalize_copy(repo, NO_MODEL_PY, keep_model_py=False)
    for name, (old, new, _) in TYPOS.items():
        config = normalize_copy(repo, name) / "config.pbtxt"
        text = config.read_text()
        assert old in text, f"{old!r} not in the normalize step's config"
        config.write_text(text.replace(old, new))
    return repo


@pytest.fixture(scope="module")
def server(repository) -> Iterator[TritonServer]:
    options = server_options(
        "test_load_checks",
        model_repository=repository,
        models=(spec.ENSEMBLE,),
        exit_timeout_s=5,  # should a load get stuck after all, do not wait 30 s at the end
    )
    with TritonServer(options) as running:
        yield running


def cli(server: TritonServer, *args: str) -> subprocess.CompletedProcess:
    key = key_file(server, server.options.log_file.parent)
    return client_cli(
        "--url", server.options.http_url, "--repository-key-file", str(key),
        "--timeout", "20", *args, timeout=120,
    )  # fmt: skip


def load(server: TritonServer, repository: Path, model: str, *extra: str):
    return cli(server, "models", "load", model, "--model-repository", str(repository), *extra)


def index(server: TritonServer) -> dict[str, list[str]]:
    o = server.options
    with RepositoryClient(o.http_url, key=o.repository_key, timeout_s=20) as repo:
        rows: dict[str, list[str]] = {}
        for row in repo.index():
            rows.setdefault(row.name, []).append(row.state)
        return rows


def one_error_line(out: subprocess.CompletedProcess) -> str:
    """The CLI's error: exit 1, a single ``error: ...`` line, nothing on stdout."""
    assert out.returncode == 1, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr
    return lines[0]


def test_python_model_without_model_py_is_refused_before_sending(server, repository):
    """Triton would keep it LOADING until a restart; nothing is sent, the message names the
    missing file and the preflight."""
    line = one_error_line(load(server, repository, NO_MODEL_PY))
    assert f"{NO_MODEL_PY}: 1/model.py is missing" in line, line
    assert "python -m tritonrepo.server.preflight" in line, line
    assert "LOADING" not in index(server).get(NO_MODEL_PY, []), "the load was sent"


@pytest.mark.parametrize("model", sorted(TYPOS))
def test_config_typo_is_named_with_its_file_line_and_column(server, repository, model):
    _, new, reason = TYPOS[model]
    config = repository / model / "config.pbtxt"
    line_no = next(i for i, ln in enumerate(config.read_text().splitlines(), 1) if new in ln)
    line = one_error_line(load(server, repository, model))
    assert re.search(rf"{re.escape(str(config))}:{line_no}:\d+: .*{re.escape(reason)}", line), line
    assert "failed to poll" not in line  # refused before Triton saw it


def test_load_that_fails_at_the_server_says_why_from_the_index(server, repository):
    """Run away from the repository (nothing to check locally), the typo reaches Triton,
    whose answer is only "failed to poll": the index says Triton could not read the config."""
    model = "normalize_type_typo"
    line = one_error_line(load(server, Path("/nonexistent/repository"), model))
    assert "failed to poll from model repository" in line, line
    assert f"Triton lists {model} but could not read its config" in line, line
    assert "python -m tritonrepo.server.preflight" in line, line


def test_model_name_typo_suggests_the_closest_name(server, repository):
    line = one_error_line(load(server, repository, "text_embeding_normalize"))
    assert f"no model 'text_embeding_normalize' in {repository}" in line, line
    assert "did you mean 'text_embedding_normalize'?" in line, line
    out = cli(
        server, "rollout", "text_embeding_encoder", "--version", "2",
        "--model-repository", str(repository),
    )  # fmt: skip
    line = one_error_line(out)
    assert "did you mean 'text_embedding_encoder'?" in line, line
    o = server.options
    with (  # the API, without a local repository: the index's names
        RepositoryClient(o.http_url, key=o.repository_key) as repo,
        pytest.raises(RolloutError, match=r"did you mean 'text_embedding_encoder'\?"),
    ):
        rollout(repo, "text_embedding_encodr", 2)


def test_interface_change_under_a_loaded_ensemble_is_refused_unless_forced(server, repository):
    """The normalize step's output grows to 768 values while text_embedding (declared 384) is
    loaded: refused, naming the ensemble and the tensor, and the ensemble keeps serving. With
    --force it is loaded (and Triton takes the ensemble down); the original config then restores
    both."""
    config = repository / spec.NORMALIZE_MODEL / "config.pbtxt"
    original = config.read_text()
    old = '{ name: "EMBEDDING" data_type: TYPE_FP32 dims: [ 384 ] }'
    assert old in original
    config.write_text(original.replace(old, old.replace("384", "768")))
    try:
        line = one_error_line(load(server, repository, spec.NORMALIZE_MODEL))
        assert f"the loaded ensemble '{spec.ENSEMBLE}' uses {spec.NORMALIZE_MODEL}" in line, line
        assert "tensor 'EMBEDDING'" in line and "--force" in line, line
        assert cli(server, "models", "ready", spec.ENSEMBLE).returncode == 0
        forced = load(server, repository, spec.NORMALIZE_MODEL, "--force")
        assert forced.returncode == 0, forced.stderr
    finally:
        config.write_text(original)
        restored = load(server, repository, spec.NORMALIZE_MODEL, "--force")
        again = load(server, repository, spec.ENSEMBLE)
    assert restored.returncode == 0, restored.stderr
    assert again.returncode == 0, again.stderr
    assert cli(server, "models", "ready", spec.ENSEMBLE).returncode == 0
