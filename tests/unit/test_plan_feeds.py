"""Every TensorRT plan model gets its profile, calibration feeds and gate from exactly one place
(``builders.pipeline.plan_feeds.for_model``), found from the descriptions and their builder
modules; a model nothing owns is refused. The plan models are read from the configs (platform
``tensorrt_plan``), not from the code under test. No TensorRT, no server."""

from __future__ import annotations

import importlib

import pytest

from builders.gates import accuracy_gate
from builders.pipeline import core_owners, plan_data, plan_feeds
from builders.tensorrt import image_plan_data, plan_config
from tritonrepo.image import spec as image_spec
from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo_format.configs import load_config


def configured_plan_models() -> list[str]:
    return sorted(
        path.parent.name
        for path in MODEL_REPOSITORY.glob("*/config.pbtxt")
        if load_config(path).platform == "tensorrt_plan"
    )


def claimants(model: str) -> list[str]:
    """Every place that could give ``model``'s feeds: a description whose generic core it is,
    or a builder module (named by a description) that builds it."""
    found = []
    for pipeline in core_owners.described_pipelines():
        core = pipeline.core
        if core.builder is None and core.model == model:
            found.append(str(pipeline.source))
        elif core.builder is not None:
            module = importlib.import_module(core.builder)
            if model in getattr(module, "MODELS", (core.model,)):
                found.append(core.builder)
    return sorted(set(found))


PLAN_MODELS = configured_plan_models()


def test_the_repository_has_plan_models_of_both_kinds():
    assert {"ctr_model", "image_classifier_resnet50", "nudenet_detector_model"} <= set(PLAN_MODELS)
    assert plan_feeds.plan_models(MODEL_REPOSITORY) == PLAN_MODELS


@pytest.mark.parametrize("model", PLAN_MODELS)
def test_every_plan_model_gets_feeds_from_exactly_one_place(model):
    assert len(claimants(model)) == 1, claimants(model)
    feeds = plan_feeds.for_model(model, MODEL_REPOSITORY)
    assert callable(feeds.profile) and callable(feeds.calibration) and callable(feeds.gate)
    assert set(feeds.tolerance) >= {"fp32", "fp16", "int8"}
    cfg = load_config(MODEL_REPOSITORY / model / "config.pbtxt")
    owner = core_owners.owner(model)
    # Same profile and tolerances as the specs' and descriptions' code gives them.
    if owner.builder is None:
        assert feeds.profile(cfg) == plan_data.profile(owner.pipeline, cfg)
        assert feeds.tolerance == plan_data.RELATIVE_TOLERANCE
    else:
        assert feeds.profile(cfg) == plan_config.model_profile(model, cfg)
        photos = model in image_spec.MODEL_PREPROCESSING  # the image classifiers
        expected = image_plan_data.TOLERANCES if photos else accuracy_gate.TOLERANCES
        assert feeds.tolerance == expected


def test_an_unknown_model_is_refused_with_the_known_ones():
    with pytest.raises(plan_feeds.NoPlanFeeds, match="no TensorRT plan feeds for 'no_such_model'"):
        plan_feeds.for_model("no_such_model", MODEL_REPOSITORY)
    with pytest.raises(plan_feeds.NoPlanFeeds, match=r"known: .*ctr_model"):
        plan_feeds.for_model("no_such_model", MODEL_REPOSITORY)


def test_a_builder_module_without_plan_feeds_is_refused(monkeypatch):
    module = importlib.import_module(core_owners.owner("ctr_session").builder)
    monkeypatch.delattr(module, "PLAN_FEEDS")
    with pytest.raises(plan_feeds.NoPlanFeeds, match="declares no PLAN_FEEDS"):
        plan_feeds.for_model("ctr_session", MODEL_REPOSITORY)


def test_a_model_claimed_twice_is_refused(monkeypatch):
    module = importlib.import_module(core_owners.owner("ctr_model").builder)
    monkeypatch.setattr(module, "MODELS", ("ctr_model", "nudenet_detector_model"), raising=False)
    with pytest.raises(ValueError, match="nudenet_detector_model is claimed by"):
        plan_feeds.for_model("ctr_model", MODEL_REPOSITORY)
