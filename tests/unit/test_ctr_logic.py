"""Unit tests of the CTR logic shared by the Python-backend models (no server)."""

from __future__ import annotations

import numpy as np
import pytest

from reference_data.click_log import ClickLogGenerator, calibration_batches
from tritonrepo.ctr import spec
from tritonrepo.ctr.features import (
    check_candidates,
    check_history,
    check_top_k,
    history_window,
    model_rows,
)
from tritonrepo.ctr.ranking import top_k
from tritonrepo.ctr.sessions import SessionStore, UnknownSession
from tritonrepo.step.errors import InvalidRequest


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_history_window_maps_oov_keeps_last_63_and_left_pads():
    assert history_window(np.array([], np.int64)).tolist() == [0] * 63
    assert history_window(np.array([5, 10_000, -1, 9_999])).tolist()[-4:] == [5, 0, 0, 9_999]
    long = np.arange(1, 101)
    assert history_window(long).tolist() == list(range(38, 101))
    rows = model_rows(history_window(np.array([3])), np.array([7, 12_345]))
    assert rows.shape == (2, 64) and rows[:, -1].tolist() == [7, 0] and rows[0, -2] == 3


def test_request_checks():
    assert check_top_k(None) == spec.DEFAULT_TOP_K
    for bad in (np.array([0]), np.array([-3]), np.array([1, 2])):
        with pytest.raises(InvalidRequest):
            check_top_k(bad)
    for n in (0, 513):
        with pytest.raises(InvalidRequest, match=f"got {n}"):
            check_candidates(np.arange(n))
    assert check_candidates(np.arange(512)).shape == (512,)


def test_history_cap_and_top_k_range():
    assert check_history(np.arange(spec.MAX_HISTORY)).shape == (spec.MAX_HISTORY,)
    assert check_history(np.array([], np.int64)).shape == (0,)
    with pytest.raises(InvalidRequest, match=r"HISTORY must hold at most 4096 item ids, got 4097"):
        check_history(np.arange(spec.MAX_HISTORY + 1))
    int32_max = np.iinfo(np.int32).max
    assert check_top_k(np.array([int32_max], np.int32)) == int32_max
    with pytest.raises(InvalidRequest, match=r"TOP_K must be > 0, got -2147483648"):
        check_top_k(np.array([np.iinfo(np.int32).min], np.int32))


def test_preprocess_step_rejects_each_bound_with_its_own_message():
    from tritonrepo.ctr.steps import PreprocessStep

    step = PreprocessStep()
    extremes = np.array([np.iinfo(np.int64).min, -1, 0, 10_000, np.iinfo(np.int64).max])
    out = step.prepare(
        {"HISTORY": extremes, "CANDIDATES": extremes, "TOP_K": np.array([2**31 - 1], np.int32)}
    )
    assert out["input_ids"].shape == (5, 64) and not out["input_ids"].any()  # all OOV -> 0
    assert out["CANDIDATE_IDS"].tolist() == extremes.tolist() and out["K"].tolist() == [2**31 - 1]
    good = {"HISTORY": np.arange(3), "CANDIDATES": np.arange(1, 4)}
    for missing in ("HISTORY", "CANDIDATES"):  # named, should a config make them optional
        with pytest.raises(InvalidRequest, match=f"input '{missing}' is missing"):
            step.prepare({k: v for k, v in good.items() if k != missing})
    for change, message in [
        ({"HISTORY": np.arange(spec.MAX_HISTORY + 1)}, "HISTORY must hold at most 4096"),
        ({"CANDIDATES": np.arange(513)}, "CANDIDATES must hold 1 to 512 item ids, got 513"),
        ({"TOP_K": np.array([0], np.int32)}, "TOP_K must be > 0, got 0"),
    ]:
        with pytest.raises(InvalidRequest, match=message):
            step.prepare({**good, **change})


def test_top_k_descending_with_stable_ties_and_cut():
    ids, scores = top_k(np.array([4, 5, 6, 7]), np.array([[0.2], [0.9], [0.2], [0.5]]), 3)
    assert ids.tolist() == [5, 7, 4] and scores.tolist() == pytest.approx([0.9, 0.5, 0.2])
    assert len(top_k(np.array([1]), np.array([0.1]), 10)[0]) == 1
    with pytest.raises(ValueError):
        top_k(np.array([1, 2]), np.array([0.1]), 1)


def test_session_store_rolls_the_window_like_the_full_history():
    store = SessionStore(idle_timeout_s=10, max_sessions=10)
    history: list[int] = []
    rng = np.random.default_rng(0)
    for i, item in enumerate(rng.integers(-2, 10_002, size=80).tolist()):
        window = store.next_window("s", item, start=i == 0)
        store.commit("s", window)
        history.append(item)
        assert window.tolist() == history_window(np.array(history)).tolist()


def test_session_store_requires_start_and_forgets_on_end():
    store = SessionStore(idle_timeout_s=10, max_sessions=10)
    with pytest.raises(UnknownSession, match="never started"):
        store.next_window(7, 1, start=False)
    store.commit(7, store.next_window(7, 1, start=True))
    assert 7 in store and "7" not in store  # numeric and string IDs are different sessions
    store.end(7)
    assert len(store) == 0
    with pytest.raises(UnknownSession):
        store.next_window(7, 2, start=False)


def test_session_store_evicts_idle_and_least_recently_used():
    clock = FakeClock()
    store = SessionStore(idle_timeout_s=5, max_sessions=3, clock=clock)
    for key in ("a", "b", "c"):
        store.commit(key, store.next_window(key, 1, start=True))
        clock.now += 1
    store.commit("a", store.next_window("a", 2, start=False))  # a is now the freshest
    store.commit("d", store.next_window("d", 1, start=True))  # over the bound: b goes
    assert sorted(store._windows) == ["a", "c", "d"] and store.evicted_full == 1
    clock.now += 4.5  # c idle 6.5 s, a and d idle 4.5 s
    assert store.evict_idle() == 1 and "c" not in store and len(store) == 2
    with pytest.raises(UnknownSession, match="evicted"):
        store.next_window("c", 1, start=False)


def test_click_log_is_seeded_and_calibration_sources_differ():
    a = ClickLogGenerator().sample(50, split_seed=9)
    b = ClickLogGenerator().sample(50, split_seed=9)
    assert np.array_equal(a.rows, b.rows) and np.array_equal(a.clicks, b.clicks)
    assert a.rows.shape == (50, 64) and set(np.unique(a.clicks)) <= {0.0, 1.0}
    log = np.concatenate(list(calibration_batches(64, 16, "log")))
    rand = np.concatenate(list(calibration_batches(64, 16, "random")))
    assert log.shape == rand.shape == (64, 64) and not np.array_equal(log, rand)
    with pytest.raises(ValueError):
        next(calibration_batches(source="other"))
