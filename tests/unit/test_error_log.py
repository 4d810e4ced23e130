"""Rate limiting of the server-side error log (tritonrepo.step.error_log), without a server."""

from __future__ import annotations

import pytest

from tritonrepo.step.error_log import MAX_MESSAGE_CHARS, ErrorLog


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_is_written_then_one_line_per_interval_with_the_skipped_count():
    lines: list[str] = []
    clock = Clock()
    log = ErrorLog(lines.append, burst=3, per_second=2.0, clock=clock)
    written = [log.error("tok", f"r{i}", "bad text") for i in range(10)]
    assert written == [True] * 3 + [False] * 7
    assert lines[0] == "request error: model=tok request_id=r0: bad text"
    clock.now += 0.5  # one token back at 2 lines/s
    assert log.error("tok", "r10", "bad text")
    assert lines[-1].endswith("(7 earlier error(s) not logged: rate limit)")
    assert not log.error("tok", "r11", "bad")
    clock.now += 10.0  # refills to the burst, not beyond
    assert [log.error("tok", "x", "m") for _ in range(4)] == [True, True, True, False]


def test_message_is_one_line_cut_and_a_missing_id_is_a_dash():
    lines: list[str] = []
    log = ErrorLog(lines.append)
    log.error("pool", "", "first\n  second " + "x" * 2000)
    assert "\n" not in lines[0]
    assert "request_id=-: first second x" in lines[0]
    assert len(lines[0].split("request_id=-: ", 1)[1]) == MAX_MESSAGE_CHARS


@pytest.mark.parametrize(("burst", "rate"), [(0, 1.0), (1, 0.0)])
def test_bad_settings_are_refused(burst, rate):
    with pytest.raises(ValueError):
        ErrorLog(print, burst=burst, per_second=rate)
