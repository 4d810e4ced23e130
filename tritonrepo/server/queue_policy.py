"""The queue policies a batching model config may carry: one source for the blocks that the
``.pbtxt`` files repeat (model configs cannot include files).

Every batching model (Python steps, one-step models, core models) has Triton's plain queue,
:data:`PLAIN`, unless its description asks for priority levels: no levels, no timeout, no
bound. It is the only queue with which the dynamic batcher prefetches batches; with any queue
policy, when every instance is busy, the batcher waits for one to ask for work and misses the
wake-up often enough that requests stall 500 ms (core ``dynamic_batch_scheduler.cc``,
``WaitForPayloadSlotAvailable``; docs/known_issues.md): ``ctr_ranking`` at concurrency 4 had a
p99 of 512 ms on 2 cores with priority levels on its core model.

A core model whose description sets ``priority_levels = 2`` (``[model]``, or one config set's
table) gets two priority levels in that set, each with a bounded queue and a queue timeout that
REJECTs (docs/operations/priority.md):

* level :data:`REALTIME` (1), the default of a request that names none: 30 s in the queue at
  most;
* level :data:`BULK` (2): batch jobs; may wait 10 min behind real-time traffic and queue deeper.

Queue sizes depend on the device a config set runs on: on CPU (``configs/cpu.pbtxt``, 2 cores,
about 90 single-text requests/s) 256 queued real-time requests are about 3 s of work; a GPU
(``config.pbtxt``, ``configs/torch_gpu.pbtxt``) drains a queue of 1024 in well under the
timeout. Bulk holds 4 × real-time, the in-flight windows of many bulk jobs. Only such a model
applies a request's own ``timeout`` (Triton applies it only when it is lower than the level's
default; a plain queue ignores it), and only it may stall as above.

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
from tritonrepo_format import roles
from tritonrepo_format.config_sets import cpu_sets

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
# Triton's plain queue (no levels, no timeout, no bound), the only queue with which the
# dynamic batcher prefetches batches instead of waiting for a free instance (core
# scheduler_utils.cc, PriorityQueue: support_prefetching_). That wait is woken only by a new
# request or after 500 ms (core dynamic_batch_scheduler.cc, WaitForPayloadSlotAvailable, the
# same in r24.10 and r26.05): under a closed loop every in-flight request then stalls 500 ms,
# and a small model spends a third of its time so (docs/known_issues.md). Priorities, queue
# bounds and request timeouts do not apply there.
PLAIN = QueuePolicy(
    priority_levels=0,
    default_priority_level=0,
    default=LevelPolicy(timeout_us=0, allow_timeout_override=False),
)


def priority_policy(config_set: str | None) -> QueuePolicy:
    """The two-level policy of a core model that asks for priorities, with the queue sizes of
    ``config_set``'s device (``None`` = ``config.pbtxt``, a GPU set)."""
    return CORE_CPU if config_set in CPU_CONFIG_SETS else CORE_GPU


@functools.lru_cache(maxsize=1)
def core_models() -> tuple[str, ...]:
    """The models whose dynamic batcher may have priority levels: those that run the network, a
    core runtime (TensorRT plan, ONNX Runtime or PyTorch backend) in at least one config set
    (:func:`tritonrepo_format.roles.core_models`, read from the repository's
    configs), not a Python step."""
    return roles.core_models(MODEL_REPOSITORY)


def expected_policy(model: str, config_set: str | None, levels: int) -> QueuePolicy:
    """The policy a batching config of ``model`` in ``config_set`` (``None`` = ``config.pbtxt``,
    else ``configs/<config_set>.pbtxt``) must carry, given the ``priority_levels`` it declares:
    :func:`priority_policy` for a core model (:func:`core_models`, not a one-step model) that
    declares levels, :data:`PLAIN` for every other."""
    if levels and model in core_models() and model not in _one_step_models(config_set):
        return priority_policy(config_set)
    return PLAIN


def config_json(policy: QueuePolicy) -> dict[str, object]:
    """The ``dynamic_batching`` fields of ``policy`` as Triton's JSON model config writes them
    (``GET /v2/models/<m>/config``), to merge into a config given to the load API: e.g. a
    running model given priority levels without a new description."""

    def level(p: LevelPolicy) -> dict[str, object]:
        return {
            "timeout_action": p.timeout_action,
            "default_timeout_microseconds": str(p.timeout_us),
            "allow_timeout_override": p.allow_timeout_override,
            "max_queue_size": p.max_queue_size,
        }

    return {
        "priority_levels": str(policy.priority_levels),
        "default_priority_level": str(policy.default_priority_level),
        "default_queue_policy": level(policy.default),
        "priority_queue_policy": {str(k): level(v) for k, v in policy.per_level.items()},
    }


@functools.lru_cache(maxsize=8)
def _one_step_models(config_set: str | None) -> tuple[str, ...]:
    """The one-step pipelines of ``config_set``
    (:func:`tritonrepo_format.roles.one_step_models`)."""
    return roles.one_step_models(MODEL_REPOSITORY, config_set)
