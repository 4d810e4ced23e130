"""The session store (tritonrepo.step.sessions) and one execute of a generated session model
(tritonrepo.pipelines.session_calls.SessionEvents) without a server: the step carries state per
correlation ID, the core model is called once for the events of several sessions, a failed
event changes no state, END drops it, a full store refuses new sessions, idle ones are evicted.

The reference is a plain loop over each session's history (running sums), not the code under
test."""

from __future__ import annotations

import numpy as np
import pytest

from tritonrepo.pipelines.function_calls import OutputSpec
from tritonrepo.pipelines.session_calls import Event, SessionEvents
from tritonrepo.step.errors import InvalidRequest
from tritonrepo.step.sessions import SessionsFull, SessionStore, UnknownSession

F32 = np.dtype(np.float32)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def running_sum(state, inputs):
    """The user's step: state = the sum of the values so far; refuses negative values."""
    x = inputs["X"]
    if (x < 0).any():
        raise ValueError("X must be >= 0")
    total = x if state is None else state + x
    return total, {"total": total.astype(np.float32), "N": np.array([[1]], dtype=np.int32)}


def post(inputs):
    return {"Y": inputs["doubled"], "N": inputs["N"]}


class Core:
    """The core model: doubles ``total``; records the rows of every call."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def __call__(self, feeds):
        self.calls.append(len(feeds["total"]))
        return {"doubled": 2 * feeds["total"]}


def make(store: SessionStore, core: Core, max_batch: int = 32) -> SessionEvents:
    return SessionEvents(
        running_sum, "t:running_sum", post, "t:post", store,
        {"total": OutputSpec(F32, (2,)), "N": OutputSpec(np.dtype(np.int32), (1,))}, ("total",),
        {"Y": OutputSpec(F32, (2,)), "N": OutputSpec(np.dtype(np.int32), (1,))}, core, max_batch,
    )  # fmt: skip


def ev(key, x, start=False, end=False) -> Event:
    return Event(key, start, end, {"X": np.array([x], dtype=np.float32)})


def test_interleaved_sessions_keep_their_own_state_and_share_core_calls():
    core = Core()
    events = make(SessionStore(60, 10), core)
    history: dict[object, list] = {"a": [], 7: []}
    rng = np.random.default_rng(0)
    for step in range(5):
        batch = []
        for key in history:
            x = rng.random(2).astype(np.float32)
            history[key].append(x)
            batch.append(ev(key, x, start=step == 0))
        results = events.run(batch)
        for key, result in zip(history, results, strict=True):
            want = 2 * np.sum(history[key], axis=0)
            np.testing.assert_allclose(result["Y"][0], want, rtol=1e-6)
    assert core.calls == [2] * 5  # one core call per execute, both sessions' rows


def test_core_calls_are_chunked_by_its_max_batch_size():
    core = Core()
    events = make(SessionStore(60, 10), core, max_batch=2)
    results = events.run([ev(k, [k, k], start=True) for k in range(1, 6)])
    assert core.calls == [2, 2, 1]
    assert [float(r["Y"][0, 0]) for r in results] == [2.0, 4.0, 6.0, 8.0, 10.0]


def test_a_bad_event_fails_alone_and_changes_no_state():
    events = make(SessionStore(60, 10), Core())
    events.run([ev("s", [1, 1], start=True)])
    bad, good = events.run([ev("s", [-1, 0]), ev("t", [5, 5], start=True)])
    assert isinstance(bad, InvalidRequest) and "X must be >= 0" in str(bad)
    assert good["Y"].tolist() == [[10, 10]]
    (after,) = events.run([ev("s", [2, 2])])
    assert after["Y"].tolist() == [[6, 6]]  # 2 * (1 + 2): the bad event left no trace


def test_end_drops_the_state_and_a_continuation_is_refused():
    store = SessionStore(60, 10)
    events = make(store, Core())
    events.run([ev("s", [1, 1], start=True)])
    events.run([ev("s", [1, 1], end=True)])
    assert "s" not in store
    (refused,) = events.run([ev("s", [1, 1])])
    assert isinstance(refused, UnknownSession) and "sequence_start" in str(refused)
    (one,) = events.run([ev("s", [3, 3], start=True, end=True)])  # START|END: one request
    assert one["Y"].tolist() == [[6, 6]] and "s" not in store


def test_a_full_store_refuses_new_sessions_and_keeps_the_open_ones():
    store = SessionStore(60, 2, when_full="refuse")
    events = make(store, Core())
    events.run([ev("a", [1, 1], start=True), ev("b", [1, 1], start=True)])
    (refused,) = events.run([ev("c", [1, 1], start=True)])
    assert isinstance(refused, SessionsFull) and "max_sessions" in str(refused)
    (a,) = events.run([ev("a", [1, 1], start=True)])  # restarting an open session is fine
    assert a["Y"].tolist() == [[2, 2]] and len(store) == 2


def test_idle_sessions_are_evicted_at_the_next_execute():
    clock = FakeClock()
    store = SessionStore(5, 10, clock=clock)
    events = make(store, Core())
    events.run([ev("old", [1, 1], start=True)])
    clock.now += 4
    events.run([ev("new", [1, 1], start=True)])
    clock.now += 2  # old idle 6 s, new 2 s
    (refused, kept) = events.run([ev("old", [1, 1]), ev("new", [1, 1])])
    assert isinstance(refused, UnknownSession) and "evicted" in str(refused)
    assert kept["Y"].tolist() == [[4, 4]] and store.evicted_idle == 1


def test_two_events_of_one_session_in_one_execute_run_in_order():
    core = Core()
    events = make(SessionStore(60, 10), core)
    first, second = events.run([ev("s", [1, 1], start=True), ev("s", [2, 2])])
    assert first["Y"].tolist() == [[2, 2]] and second["Y"].tolist() == [[6, 6]]
    assert core.calls == [1, 1]


def test_a_batch_over_one_and_a_failing_core_are_per_event_errors():
    events = make(SessionStore(60, 10), Core())
    wide = Event("w", True, False, {"X": np.ones((2, 2), dtype=np.float32)})
    (result,) = events.run([wide])
    assert isinstance(result, InvalidRequest) and "one event per request" in str(result)

    def broken(feeds):
        return RuntimeError("core down")

    failing = make(SessionStore(60, 10), Core())
    failing.core_call = broken
    (down,) = failing.run([ev("s", [1, 1], start=True)])
    assert isinstance(down, RuntimeError) and "core down" in str(down)
    assert "s" not in failing.store  # nothing committed


def test_store_rejects_bad_settings():
    with pytest.raises(ValueError, match="when_full"):
        SessionStore(1, 1, when_full="drop")
    with pytest.raises(ValueError):
        SessionStore(0, 1)
