"""The proof of a stateful core graph (state in the core), event by event in ONNX Runtime
(:func:`prove_events`), and the check of the built graph's I/O against the configs
(:func:`prove_built_graph`), run by :mod:`builders.pipeline.kinds.core_state`.

Triton's implicit state feeds each state ``output`` of a session's request back as the state
``input`` of its next request, starting from the initial state (zeros) at START. The proof does
the same in ONNX Runtime: each sample session is run request by request from zeros, with the
controls a sequence batcher sends (START on the first event, END on the last, READY on all), and
every event's outputs must equal the description's ``reference`` (the stateless answer computed
on the whole session, one row per event): integers exactly, floats within :data:`ATOL` +
:data:`RTOL` x |reference|.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from builders.pipeline.graph import ModelSourceError, graph_io
from builders.pipeline.kinds.base import raised_at
from builders.pipeline.kinds.sample_checks import quiet_session_options
from tritonrepo.description import DTYPES, Pipeline, Tensor

ATOL = 1e-5  # FP32 ONNX Runtime vs the reference's own FP32 run of the same network
RTOL = 1e-5
GRAPH_FILE = "model.onnx"


@dataclass(frozen=True)
class Proof:
    """What :func:`prove_events` established: sessions and events run, the largest
    |graph - reference| over every float output (0 when all are integers)."""

    sessions: int
    events: int
    max_abs_diff: float


def graph_path(pipeline: Pipeline, repository: Path) -> Path:
    """The stateful graph the core's builder writes: ``<model>/<first version>/model.onnx``."""
    return repository / pipeline.core.model / str(pipeline.core.versions[0]) / GRAPH_FILE


def expected_io(pipeline: Pipeline) -> tuple[list[Tensor], list[Tensor]]:
    """The graph's inputs (the request's, every state input, the controls: INT32 ``[1]``, CORRID
    UINT64 ``[1]``) and outputs (the response's, every state output)."""
    assert pipeline.sequence is not None and pipeline.core_state is not None
    states = pipeline.core_state.states
    controls = [
        Tensor(name, "UINT64" if key == "corrid" else "INT32", (1,))
        for key, name in pipeline.sequence.controls.items()
        if name
    ]
    inputs = [*pipeline.inputs, *(Tensor(s.input, s.dtype, s.dims) for s in states), *controls]
    outputs = [*pipeline.outputs, *(Tensor(s.output, s.dtype, s.dims) for s in states)]
    return inputs, outputs


def check_graph_io(pipeline: Pipeline, model: Any, problems: list[str]) -> None:
    """The graph's I/O against :func:`expected_io` (names, dtypes, fixed dims; a pipeline that
    batches has a batch dim first). Controls the graph does not take are not required of it,
    but Triton binds every configured control to an engine input, so each is reported."""
    io = graph_io(model)
    batch = 0 if pipeline.max_batch_size == 0 else 1
    inputs, outputs = expected_io(pipeline)
    for kind, want, got in (("input", inputs, io.inputs), ("output", outputs, io.outputs)):
        by_name = {t.name: t for t in got}
        for t in want:
            g = by_name.get(t.name)
            if g is None:
                problems.append(
                    f"model: the stateful graph has no {kind} '{t.name}' (the config declares "
                    f"it); its {kind}s: {sorted(by_name)}; fix the builder"
                )
                continue
            dims = g.shape[batch:]
            same_dims = len(dims) == len(t.dims) and all(
                d is None or w == -1 or d == w for d, w in zip(dims, t.dims, strict=True)
            )
            fits = g.dtype == t.dtype and same_dims
            if not fits:
                shown = ["N" if d is None else d for d in dims]
                problems.append(
                    f"model: the stateful graph's {kind} '{t.name}' is {g.dtype} {shown}, the "
                    f"config declares {t.dtype} {list(t.dims)} (-1/N = any); fix the builder or "
                    "the description"
                )


def _event(values: Mapping[str, Any], j: int, batched: bool) -> dict[str, np.ndarray]:
    return {k: np.asarray(v)[j : j + 1] if batched else np.asarray(v)[j] for k, v in values.items()}


def prove_events(
    pipeline: Pipeline, model_bytes: bytes, sessions: Sequence[Mapping[str, Any]],
    reference: Callable[[dict[str, np.ndarray]], Mapping[str, Any]], problems: list[str],
) -> Proof:  # fmt: skip
    """Run every session of ``sessions`` (request tensors, one row per event) through the
    stateful graph ``model_bytes`` event by event, each state output fed back as the next state
    input from the initial state, and compare each event's outputs with row ``j`` of
    ``reference(session)`` (the answers to the whole session). Problems name the session, event
    and output (the first differing event of a session ends that session's run)."""
    import onnxruntime as ort

    assert pipeline.sequence is not None and pipeline.core_state is not None
    runner = ort.InferenceSession(model_bytes, quiet_session_options(),
                                  providers=["CPUExecutionProvider"])  # fmt: skip
    graph_inputs = {i.name for i in runner.get_inputs()}
    names = [o.name for o in runner.get_outputs()]
    batched = pipeline.max_batch_size > 0
    lead = (1,) if batched else ()
    controls = pipeline.sequence.controls
    states = pipeline.core_state.states
    worst, events_run = 0.0, 0
    for i, session in enumerate(sessions):
        count = len(np.asarray(next(iter(session.values()))))
        state = {s.input: np.zeros((*lead, *s.dims), DTYPES[s.dtype]) for s in states}
        try:
            answers = reference({k: np.asarray(v) for k, v in session.items()})
        except Exception as exc:
            problems.append(f"session.reference: session {i} failed{raised_at(exc)}: {exc!r}")
            return Proof(len(sessions), events_run, worst)
        for j in range(count):
            event = _event(session, j, batched)
            flags = {"start": j == 0, "end": j == count - 1, "ready": True}
            feed = {**event, **state}
            for key, name in controls.items():
                if name and name in graph_inputs:
                    value = i + 1 if key == "corrid" else int(flags[key])
                    dtype = np.uint64 if key == "corrid" else np.int32
                    feed[name] = np.full((*lead, 1), value, dtype)
            try:
                out = dict(zip(names, runner.run(None, feed), strict=True))
                want = _event(answers, j, batched)
            except Exception as exc:
                problems.append(f"model: session {i} event {j} failed{raised_at(exc)}: {exc!r}")
                return Proof(len(sessions), events_run, worst)
            state = {s.input: out[s.output] for s in states}
            events_run += 1
            bad = False
            for t in pipeline.outputs:
                got, ref = np.asarray(out[t.name]), np.asarray(want.get(t.name))
                if got.shape != ref.shape:
                    problems.append(
                        f"model: session {i} event {j}: output '{t.name}' has shape "
                        f"{list(got.shape)}, the reference {list(ref.shape)}"
                    )
                    bad = True
                elif got.dtype.kind == "f":
                    diff = float(np.max(np.abs(got - ref), initial=0.0))
                    worst = max(worst, diff)
                    if not np.allclose(got, ref, atol=ATOL, rtol=RTOL):
                        problems.append(
                            f"model: session {i} event {j}: output '{t.name}' differs from the "
                            f"reference by {diff:.3g} (atol {ATOL}, rtol {RTOL}); the state is "
                            "not carried as the reference carries it"
                        )
                        bad = True
                elif not np.array_equal(got, ref):
                    problems.append(
                        f"model: session {i} event {j}: output '{t.name}' is "
                        f"{got.ravel()[:8].tolist()}..., the reference "
                        f"{ref.ravel()[:8].tolist()}...; the state is not carried as the "
                        "reference carries it"
                    )
                    bad = True
            if bad:
                break
    return Proof(len(sessions), events_run, worst)


def prove_built_graph(pipeline: Pipeline, repository: Path, sessions: list, reference: Any,
                      problems: list[str]) -> Proof | None:  # fmt: skip
    """Load the built stateful graph (:func:`graph_path`), check its I/O
    (:func:`check_graph_io`) and prove it on ``sessions`` against ``reference``
    (:func:`prove_events`); None when it is not built or cannot be read, or after a problem."""
    import onnx

    path = graph_path(pipeline, repository)
    if not path.is_file():
        problems.append(
            f"model.builder: the stateful graph {path} is not built yet; build it with "
            f"`.venv/bin/python -m {pipeline.core.builder}`, then run `make pipeline "
            f"NAME={pipeline.name}` again (its folder is then no clash)"
        )
        return None
    try:
        model = onnx.load(str(path))
        check_graph_io(pipeline, model, problems)
    except (ModelSourceError, OSError, ValueError, DecodeError) as exc:
        problems.append(f"model.builder: {path} cannot be read: {exc!r}")
        return None
    if problems or reference is None:
        return None
    return prove_events(pipeline, model.SerializeToString(), sessions, reference, problems)
