"""One execute of a generated session model whose core returns the state
(tritonrepo.pipelines.session_calls.SessionEvents with core states), without a server: each
session's state is fed to the core with its event (zeros at START) and taken from the core's
outputs of that event; the events of several sessions share one core call; a failed event
(the step's ValueError, or postprocess's) changes no state; END drops it; a state output of
the wrong shape fails the event alone; with implicit state the core gets one call per event
with the session's correlation ID and START/END, and nothing is fed.

The core is a running sum written as a recurrent model (``y = x + s``, ``s_next = y``); the
reference is a plain loop over each session's history."""

from __future__ import annotations

import numpy as np

from tritonrepo.pipelines.function_calls import OutputSpec
from tritonrepo.pipelines.session_calls import CoreStateSpec, Event, SessionEvents
from tritonrepo.step.errors import InvalidRequest
from tritonrepo.step.sessions import SessionStore

F32 = np.dtype(np.float32)
STATE = CoreStateSpec("s", "s_next", F32, (2,))


def step(state, inputs):
    """The user's step: refuses negative values; counts the session's events itself."""
    x = np.asarray(inputs["X"], np.float32)
    if (x < 0).any():
        raise ValueError("X must be >= 0")
    count = 1 if state is None else state + 1
    return count, {"x": x, "N": np.array([[count]], np.int32)}


def post(inputs):
    if (inputs["y"] > 1e6).any():
        raise ValueError("too large")
    return {"Y": inputs["y"], "N": inputs["N"]}


class Core:
    """``y = s_next = x + s``; records each call's rows and sequences."""

    def __init__(self, wrong_shape: bool = False) -> None:
        self.calls: list[tuple[int, object]] = []
        self.wrong_shape = wrong_shape

    def __call__(self, feeds, sequence=None):
        self.calls.append((len(feeds["x"]), sequence))
        if sequence is not None:  # implicit: the core keeps s itself (not fed)
            assert "s" not in feeds
            return {"y": feeds["x"]}
        y = feeds["x"] + feeds["s"]
        return {"y": y, "s_next": y[:, :1] if self.wrong_shape else y}


def make(core: Core, implicit: bool = False) -> SessionEvents:
    return SessionEvents(
        step, "t:step", post, "t:post", SessionStore(60, 10),
        {"x": OutputSpec(F32, (2,)), "N": OutputSpec(np.dtype(np.int32), (1,))}, ("x",),
        {"Y": OutputSpec(F32, (2,)), "N": OutputSpec(np.dtype(np.int32), (1,))}, core, 32,
        (STATE,), implicit,
    )  # fmt: skip


def ev(key, x, start=False, end=False) -> Event:
    return Event(key, start, end, {"X": np.array([x], dtype=np.float32)})


def test_each_session_gets_its_state_back_from_the_core_and_sessions_share_core_calls():
    core = Core()
    events = make(core)
    history: dict[object, list] = {"a": [], 7: []}
    rng = np.random.default_rng(0)
    for j in range(4):
        batch = []
        for key in history:
            x = rng.random(2).astype(np.float32)
            history[key].append(x)
            batch.append(ev(key, x, start=j == 0))
        for key, result in zip(history, events.run(batch), strict=True):
            np.testing.assert_allclose(result["Y"][0], np.sum(history[key], axis=0), rtol=1e-6)
            assert result["N"][0, 0] == j + 1  # the step's own state, beside the core's
    assert [rows for rows, _ in core.calls] == [2, 2, 2, 2]  # one core call per wave


def test_a_failed_event_changes_no_state_and_end_drops_it():
    events = make(Core())
    events.run([ev("k", [1, 1], start=True)])
    (bad,) = events.run([ev("k", [-1, 0])])
    assert isinstance(bad, InvalidRequest)
    (late,) = events.run([ev("k", [2e6, 0])])  # postprocess refuses after the core ran
    assert isinstance(late, InvalidRequest)
    (ok,) = events.run([ev("k", [2, 3], end=True)])
    np.testing.assert_allclose(ok["Y"][0], [3, 4])  # 1+2, 1+3: neither failure counted
    assert ok["N"][0, 0] == 2
    (gone,) = events.run([ev("k", [1, 1])])
    assert isinstance(gone, InvalidRequest) and "start it again" in str(gone)
    (fresh,) = events.run([ev("k", [5, 5], start=True)])
    np.testing.assert_allclose(fresh["Y"][0], [5, 5])  # zeros at START


def test_a_state_output_of_the_wrong_shape_fails_its_event_alone():
    events = make(Core(wrong_shape=True))
    (result,) = events.run([ev("k", [1, 1], start=True)])
    assert isinstance(result, RuntimeError)
    assert "state output 's_next' is float32 [1, 1], declared float32 [1, 2]" in str(result)


def test_implicit_state_sends_each_event_with_its_sequence_and_feeds_nothing():
    core = Core()
    events = make(core, implicit=True)
    results = events.run([ev("a", [1, 1], start=True), ev(9, [2, 2], start=True, end=True)])
    assert all(not isinstance(r, Exception) for r in results), results
    assert core.calls == [(1, ("a", True, False)), (1, (9, True, True))]
    events.run([ev("a", [3, 3], end=True)])
    assert core.calls[-1] == (1, ("a", False, True))


def test_without_a_step_the_request_tensors_go_to_the_core():
    core = Core()
    events = SessionEvents(
        None, "", lambda inputs: {"Y": inputs["y"]}, "t:post", SessionStore(60, 10),
        {"x": OutputSpec(F32, (2,))}, ("x",), {"Y": OutputSpec(F32, (2,))}, core, 32, (STATE,),
    )  # fmt: skip
    sent = [Event("k", j == 0, False, {"x": np.array([[j, 1]], np.float32)}) for j in range(3)]
    totals = [events.run([e])[0]["Y"][0].tolist() for e in sent]
    assert totals == [[0, 1], [1, 2], [3, 3]]
