"""Every config set of every batching model carries the queue policy of
tritonrepo.server.queue_policy, read through tritonclient's ModelConfig protobuf; the client's
priority levels (tritonrepo_client.scheduling, its own copy) agree with it."""

from __future__ import annotations

from pathlib import Path

import pytest
from tritonclient.grpc import model_config_pb2 as mc

from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo.server import queue_policy
from tritonrepo.server.queue_policy import LevelPolicy, QueuePolicy, expected_policy
from tritonrepo_client import scheduling
from tritonrepo_client.model_repository.configs import all_config_files, load_config

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
    want = expected_policy(cfg.name, _config_set(path))
    problems = mismatches(cfg.dynamic_batching, want)
    assert not problems, f"{_id(path)}: " + "; ".join(problems)


def test_the_check_names_file_and_field_on_a_mismatch():
    path = MODEL_REPOSITORY / "ctr_model" / "configs" / "cpu.pbtxt"
    batching = load_config(path).dynamic_batching
    batching.priority_queue_policy[2].max_queue_size = 999
    batching.default_queue_policy.timeout_action = mc.ModelQueuePolicy.DELAY
    assert mismatches(batching, queue_policy.CORE_CPU) == [
        "dynamic_batching.default_queue_policy.timeout_action = 1, expected 0",
        "dynamic_batching.priority_queue_policy[2].max_queue_size = 999, expected 1024",
    ]
    # The GPU sizes differ from the CPU ones: a CPU config set with GPU sizes fails.
    assert mismatches(load_config(path).dynamic_batching, queue_policy.CORE_GPU)


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
    # A default timeout of 0 would make Triton ignore every request's own timeout.
    assert queue_policy.STEP.default.timeout_us > 0
    assert queue_policy.STEP.default.allow_timeout_override
