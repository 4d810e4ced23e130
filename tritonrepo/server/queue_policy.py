"""The queue policy every batching model config carries: one source for the block that the
``.pbtxt`` files repeat (model configs cannot include files).

Core models (the ones that run the network) have two priority levels, each with a bounded
queue and a queue timeout that REJECTs (docs/operations/priority.md):

* level :data:`REALTIME` (1), the default of a request that names none: 30 s in the queue at
  most;
* level :data:`BULK` (2): batch jobs; may wait 10 min behind real-time traffic and queue deeper.

Queue sizes depend on the device a config set runs on: on CPU (``configs/cpu.pbtxt``, 2 cores,
about 90 single-text requests/s) 256 queued real-time requests are about 3 s of work; a GPU
(``config.pbtxt``, ``configs/torch_gpu.pbtxt``) drains a queue of 1024 in well under the
timeout. Bulk holds 4 × real-time, the in-flight windows of many bulk jobs.

Python steps of an ensemble (tokenize, normalize, image pre/post-processing) have no priority
levels and no queue bound, but a default timeout of 1 h rather than Triton's 0 (none): Triton
applies a request's own ``timeout`` only when it is lower than the level's default, so a default
of 0 would ignore every client's timeout.

A full queue refuses a request at once ("Exceeds maximum queue size"); a request still queued
after its timeout is refused ("Request timeout expired"); both are HTTP 503 / gRPC UNAVAILABLE.
Ensembles pass a request's priority and timeout to every step. The measurements behind the sizes:
docs/models/config_choices.md.

``sequence_batching`` (``ctr_session``) has no queue-policy fields in Triton's
``ModelSequenceBatching`` (model_config.proto, 2.51): sequences are bounded by
``max_candidate_sequences`` and the idle timeout instead.

``tests/unit/test_queue_policy.py`` checks every config set against :func:`expected_policy`;
``tritonrepo_client.scheduling`` has its own copy of the level numbers (the client imports
nothing from this package), checked equal by that test.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from tritonrepo.paths import MODEL_REPOSITORY
from tritonrepo_client.model_repository import roles
from tritonrepo_client.model_repository.config_sets import cpu_sets

REALTIME = 1
BULK = 2

CPU_CONFIG_SETS = cpu_sets()  # configs/<name>.pbtxt that run on CPU instances


@dataclass(frozen=True)
class LevelPolicy:
    """Triton's ``ModelQueuePolicy`` for one priority level.

    Attributes:
        timeout_us: ``default_timeout_microseconds``, µs a request may wait in the queue.
        max_queue_size: ``max_queue_size``, requests queued at once; 0 = unbounded.
        timeout_action: ``timeout_action`` (``REJECT``: refused with "Request timeout expired").
        allow_timeout_override: ``allow_timeout_override``: a request may set a shorter timeout.
    """

    timeout_us: int
    max_queue_size: int = 0
    timeout_action: str = "REJECT"
    allow_timeout_override: bool = True


@dataclass(frozen=True)
class QueuePolicy:
    """The queue fields of a ``dynamic_batching`` block.

    Attributes:
        priority_levels: ``priority_levels``; 0 = none.
        default_priority_level: ``default_priority_level`` (0 when there are no levels).
        default: ``default_queue_policy``.
        per_level: ``priority_queue_policy``, by level.
    """

    priority_levels: int
    default_priority_level: int
    default: LevelPolicy
    per_level: dict[int, LevelPolicy] = field(default_factory=dict)


CORE_GPU = QueuePolicy(
    priority_levels=2,
    default_priority_level=REALTIME,
    default=LevelPolicy(timeout_us=30_000_000, max_queue_size=1024),
    per_level={BULK: LevelPolicy(timeout_us=600_000_000, max_queue_size=4096)},
)
CORE_CPU = QueuePolicy(
    priority_levels=2,
    default_priority_level=REALTIME,
    default=LevelPolicy(timeout_us=30_000_000, max_queue_size=256),
    per_level={BULK: LevelPolicy(timeout_us=600_000_000, max_queue_size=1024)},
)
STEP = QueuePolicy(
    priority_levels=0,
    default_priority_level=0,
    default=LevelPolicy(timeout_us=3_600_000_000),
)
# The one-step CPU model of a described pipeline: Triton's plain queue (no levels, no timeout,
# no bound), the only queue with which the dynamic batcher prefetches batches instead of
# waiting for a free instance (core scheduler_utils.cc, PriorityQueue: support_prefetching_).
# That wait is woken only by a new request or after 500 ms (core dynamic_batch_scheduler.cc,
# WaitForPayloadSlotAvailable, the same in r24.10 and r26.05): under a closed loop every
# in-flight request then stalls 500 ms, and a small model spends a third of its time so
# (docs/known_issues.md). Priorities, queue bounds and request timeouts do not apply there.
ONE_STEP = QueuePolicy(
    priority_levels=0,
    default_priority_level=0,
    default=LevelPolicy(timeout_us=0, allow_timeout_override=False),
)


@functools.lru_cache(maxsize=1)
def core_models() -> tuple[str, ...]:
    """The models whose dynamic batcher has priority levels: those that run the network, a
    core runtime (TensorRT plan, ONNX Runtime or PyTorch backend) in at least one config set
    (:func:`tritonrepo_client.model_repository.roles.core_models`, read from the repository's
    configs), not a Python step. The generator writes the same policies into a described
    pipeline's core configs."""
    return roles.core_models(MODEL_REPOSITORY)


def expected_policy(model: str, config_set: str | None) -> QueuePolicy:
    """The policy of ``model``'s config set ``config_set`` (``None`` = ``config.pbtxt``,
    else ``configs/<config_set>.pbtxt``) when it has dynamic batching: a core model's
    (:func:`core_models`) or a Python step's."""
    if model in _one_step_models(config_set):
        return ONE_STEP
    if model in core_models():
        return CORE_CPU if config_set in CPU_CONFIG_SETS else CORE_GPU
    return STEP


@functools.lru_cache(maxsize=8)
def _one_step_models(config_set: str | None) -> tuple[str, ...]:
    """The one-step pipelines of ``config_set``
    (:func:`tritonrepo_client.model_repository.roles.one_step_models`)."""
    return roles.one_step_models(MODEL_REPOSITORY, config_set)
