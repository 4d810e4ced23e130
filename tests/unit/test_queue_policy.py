"""Every config set of every batching model carries a queue policy of
tritonrepo.server.queue_policy (Triton's plain queue, or a core model's two priority levels
where its description asks for them), read through tritonclient's ModelConfig protobuf; the
generator writes the levels where a description sets priority_levels; the client's priority
levels (tritonrepo_client.scheduling, its own copy) agree with the source."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomllib
from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2 as mc

from tests.unit.pipeline_fixtures.workspace import PACKAGE, TOY_TOML, edited
from tritonrepo.description import DescriptionError, parse
from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.server import queue_policy
from tritonrepo.server.queue_policy import LevelPolicy, QueuePolicy, expected_policy
from tritonrepo_client import scheduling
from tritonrepo_format.configs import all_config_files, load_config

QUEUE_FIELDS = ("priority_levels", "default_priority_level", "default_queue_policy")
QUEUE_FIELDS_ALL = (*QUEUE_FIELDS, "priority_queue_policy")


def _config_set(path: Path) -> str | None:
    return path.stem if path.parent.name == "configs" else None


def _batching_configs() -> list[Path]:
    return [
        p
        for p in all_config_files(MODEL_REPOSITORY)
        if load_config(p).WhichOneof("scheduling_choice")
        in ("dynamic_batching", "sequence_batching")
    ]


def _id(path: Path) -> str:
    return str(path.relative_to(MODEL_REPOSITORY))


def _level_mismatches(where: str, actual: mc.ModelQueuePolicy, want: LevelPolicy) -> list[str]:
    expected = {
        "timeout_action": mc.ModelQueuePolicy.TimeoutAction.Value(want.timeout_action),
        "default_timeout_microseconds": want.timeout_us,
        "allow_timeout_override": want.allow_timeout_override,
        "max_queue_size": want.max_queue_size,
    }
    return [
        f"{where}.{name} = {getattr(actual, name)!r}, expected {value!r}"
        for name, value in expected.items()
        if getattr(actual, name) != value
    ]


def mismatches(batching: mc.ModelDynamicBatching, want: QueuePolicy) -> list[str]:
    """Each field of ``batching`` that differs from ``want``, as ``dynamic_batching.<field>``."""
    out = []
    for name, value in (
        ("priority_levels", want.priority_levels),
        ("default_priority_level", want.default_priority_level),
    ):
        if getattr(batching, name) != value:
            out.append(f"dynamic_batching.{name} = {getattr(batching, name)}, expected {value}")
    out += _level_mismatches(
        "dynamic_batching.default_queue_policy", batching.default_queue_policy, want.default
    )
    levels = set(batching.priority_queue_policy)
    if levels != set(want.per_level):
        out.append(
            f"dynamic_batching.priority_queue_policy levels {sorted(levels)}, "
            f"expected {sorted(want.per_level)}"
        )
    for level in levels & set(want.per_level):
        out += _level_mismatches(
            f"dynamic_batching.priority_queue_policy[{level}]",
            batching.priority_queue_policy[level],
            want.per_level[level],
        )
    return out


def test_the_scan_covers_every_batching_model():
    models = {load_config(p).name for p in _batching_configs()}
    assert set(queue_policy.core_models()) - {"ctr_session"} <= models
    assert {"text_embedding_tokenize", "image_preprocess", "ctr_session"} <= models


def test_core_models_are_read_from_the_configs():
    """The networks of the shipped and example pipelines count as core models (their configs
    run a TensorRT plan or the ONNX Runtime / PyTorch backend), their Python steps do not."""
    core = set(queue_policy.core_models())
    networks = {"text_embedding_encoder", "ctr_model", "image_classifier", "breast_cancer_model"}
    assert networks | {"image_classifier_resnet50", "nudenet_detector_model"} <= core
    steps = {"text_embedding_tokenize", "text_embedding_normalize", "image_preprocess"}
    assert not core & (steps | {"ctr_preprocess", "breast_cancer_preprocess", "text_embedding"})


@pytest.mark.parametrize("path", _batching_configs(), ids=_id)
def test_every_config_set_carries_the_one_queue_policy(path: Path):
    cfg = load_config(path)
    if cfg.HasField("sequence_batching"):
        # Triton's sequence batcher has no queue policy: nothing to carry (module docstring).
        names = {f.name for f in mc.ModelSequenceBatching.DESCRIPTOR.fields}
        assert not names & set(QUEUE_FIELDS_ALL), f"{_id(path)}: sequence_batching gained {names}"
        return
    levels = cfg.dynamic_batching.priority_levels
    want = expected_policy(cfg.name, _config_set(path), levels)
    problems = mismatches(cfg.dynamic_batching, want)
    assert not problems, f"{_id(path)}: " + "; ".join(problems)


def test_the_shipped_models_keep_the_plain_queue():
    """No shipped description asks for priority levels: every batching model prefetches (the
    500 ms wait of a queue policy is met at concurrency 4 on 2 cores)."""
    for path in _batching_configs():
        batching = load_config(path).dynamic_batching
        assert not mismatches(batching, queue_policy.PLAIN), _id(path)


def test_the_check_names_file_and_field_on_a_mismatch():
    batching = mc.ModelDynamicBatching()
    queue_policy_json = queue_policy.config_json(queue_policy.CORE_CPU)
    json_format.ParseDict(queue_policy_json, batching)
    assert not mismatches(batching, queue_policy.CORE_CPU)
    batching.priority_queue_policy[2].max_queue_size = 999
    batching.default_queue_policy.timeout_action = mc.ModelQueuePolicy.DELAY
    assert mismatches(batching, queue_policy.CORE_CPU) == [
        "dynamic_batching.default_queue_policy.timeout_action = 1, expected 0",
        "dynamic_batching.priority_queue_policy[2].max_queue_size = 999, expected 1024",
    ]
    # The GPU sizes differ from the CPU ones: a CPU config set with GPU sizes fails.
    assert mismatches(batching, queue_policy.CORE_GPU)
    assert mismatches(batching, queue_policy.PLAIN)


def toy_pipeline(model_extra: str = "", preprocess_extra: str = ""):
    """The test suite's toy description (tests/unit/pipeline_fixtures) with lines added to its
    [model] and [preprocess] tables, read as the generator reads it."""
    text = edited(TOY_TOML, "[postprocess]", "[postprocess]")  # the toy text, unchanged
    text = edited(text, f'build = "{PACKAGE}.model:build"\n',
                  f'build = "{PACKAGE}.model:build"\n{model_extra}\n')  # fmt: skip
    text = edited(text, "[postprocess]", "[postprocess]")
    if preprocess_extra:
        text = edited(text, "dims = [1] }]\n", f"dims = [1] }}]\n{preprocess_extra}")
    return parse(tomllib.loads(text), Path("pipelines/toy/pipeline.toml"))


def test_a_description_that_asks_for_priorities_gets_them_on_its_core_only():
    """``priority_levels = 2`` in [model] gives the core model the two levels in every set, with
    each device's queue sizes; ``[model.cpu] priority_levels = 0`` keeps the CPU set plain; a
    step cannot ask for them."""
    from builders.pipeline.model_configs import CoreTensor, core_config

    pipeline = toy_pipeline(model_extra="priority_levels = 2\n[model.cpu]\npriority_levels = 0\n")
    core = pipeline.core
    assert core.deployments["default"].priority_levels == 2
    assert core.deployments["cpu"].priority_levels == 0
    inputs = outputs = [CoreTensor("x", "FP32", (2,))]
    for config_set, want in (("default", queue_policy.CORE_GPU), ("cpu", queue_policy.PLAIN)):
        text = core_config(pipeline, core, inputs, outputs, config_set)
        batching = mc.ModelConfig()
        text_format.Parse(text, batching)
        assert not mismatches(batching.dynamic_batching, want), config_set
    with pytest.raises(DescriptionError, match="priority levels are the core model's"):
        toy_pipeline(preprocess_extra="priority_levels = 2\n")
    with pytest.raises(DescriptionError, match="priority_levels"):
        toy_pipeline(model_extra="priority_levels = 3\n")


def test_client_priority_levels_agree_with_the_source():
    assert scheduling.REALTIME == queue_policy.REALTIME
    assert scheduling.BULK == queue_policy.BULK
    assert scheduling.PRIORITIES == {"realtime": queue_policy.REALTIME, "bulk": queue_policy.BULK}
    for policy in (queue_policy.CORE_GPU, queue_policy.CORE_CPU):
        assert policy.default_priority_level == scheduling.REALTIME
        assert set(policy.per_level) == {scheduling.BULK}
        assert policy.priority_levels == max(scheduling.PRIORITIES.values())
        # parse_priority accepts 0..priority_levels and nothing above (it would map to default)
        assert scheduling.parse_priority(str(policy.priority_levels)) == policy.priority_levels
        with pytest.raises(ValueError):
            scheduling.parse_priority(str(policy.priority_levels + 1))


def test_bulk_may_wait_longer_and_queue_deeper_than_realtime():
    for policy in (queue_policy.CORE_GPU, queue_policy.CORE_CPU):
        bulk, realtime = policy.per_level[queue_policy.BULK], policy.default
        assert bulk.timeout_us >= realtime.timeout_us
        assert bulk.max_queue_size >= realtime.max_queue_size > 0
    # The plain queue is exactly the one Triton prefetches with (scheduler_utils.cc).
    plain = queue_policy.PLAIN
    assert (plain.priority_levels, plain.default.timeout_us, plain.default.max_queue_size) == (
        0,
        0,
        0,
    )
    assert not plain.default.allow_timeout_override
