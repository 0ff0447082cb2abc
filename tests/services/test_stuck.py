"""Stuck detection is a pure function: build facts with a TestClock, move the clock, call again."""

from __future__ import annotations

from labserver.clock import TestClock
from labserver.config import StuckSettings
from labserver.services.dashboard.stuck import (
    MIN_SAMPLES,
    RunFact,
    StartFact,
    detect_stuck,
    failures_in_a_row,
)

SETTINGS = StuckSettings(time_factor=2.0, min_seconds=300.0, failed_in_a_row=3)


def _room_passed_step(clock: TestClock, n: int, minutes: float) -> tuple[list[RunFact], list[StartFact]]:
    """``n`` attendees (ids 100..) opened lab/s1 now and passed it ``minutes`` later."""
    starts = [StartFact(100 + i, "lab", "s1", clock.now()) for i in range(n)]
    clock.advance(minutes * 60)
    runs = [RunFact(100 + i, "lab", "s1", "passed", clock.now()) for i in range(n)]
    return runs, starts


def test_time_on_step_well_above_the_room_median_is_flagged_only_after_the_clock_moves() -> None:
    clock = TestClock()
    me = StartFact(1, "lab", "s1", clock.now())
    runs, starts = _room_passed_step(clock, MIN_SAMPLES, minutes=5)  # room median: 5 min
    starts.append(me)
    assert detect_stuck(runs=runs, starts=starts, now=clock.now(), settings=SETTINGS) == {}
    clock.advance(4 * 60)  # 9 min on the step: below 2 x 5 min
    assert detect_stuck(runs=runs, starts=starts, now=clock.now(), settings=SETTINGS) == {}
    clock.advance(60)  # 10 min: exactly 2 x the median
    flags = detect_stuck(runs=runs, starts=starts, now=clock.now(), settings=SETTINGS)
    assert set(flags) == {1}
    flag = flags[1]
    assert (flag.lab, flag.step, flag.reasons) == ("lab", "s1", ("slow",))
    assert flag.seconds_on_step == 600
    assert flag.typical_s == 300


def test_min_seconds_keeps_quick_steps_from_flagging_everyone() -> None:
    clock = TestClock()
    me = StartFact(1, "lab", "s1", clock.now())
    runs, starts = _room_passed_step(clock, 5, minutes=0.5)  # median 30 s
    clock.advance(200)  # 230 s on the step: > 2 x 30 s but < 300 s minimum
    assert detect_stuck(runs=runs, starts=[*starts, me], now=clock.now(), settings=SETTINGS) == {}
    clock.advance(100)
    assert set(detect_stuck(runs=runs, starts=[*starts, me], now=clock.now(), settings=SETTINGS)) == {1}


def test_before_enough_passes_the_expected_time_is_the_yardstick() -> None:
    clock = TestClock()
    starts = [StartFact(1, "lab", "s1", clock.now())]
    runs, more = _room_passed_step(clock, MIN_SAMPLES - 1, minutes=1)  # too few to trust
    clock.advance(20 * 60)
    now = clock.now()
    assert detect_stuck(runs=runs, starts=starts + more, now=now, settings=SETTINGS) == {}
    expected = {("lab", "s1"): 600.0}
    flags = detect_stuck(runs=runs, starts=starts + more, now=now, settings=SETTINGS, expected_s=expected)
    assert flags[1].typical_s == 600.0 and flags[1].reasons == ("slow",)


def test_failures_in_a_row_flag_and_a_checker_error_does_not_count() -> None:
    clock = TestClock()
    starts = [StartFact(1, "lab", "s1", clock.now())]
    runs = []
    for status in ("failed", "failed", "error"):
        clock.advance(10)
        runs.append(RunFact(1, "lab", "s1", status, clock.now()))
    assert detect_stuck(runs=runs, starts=starts, now=clock.now(), settings=SETTINGS) == {}
    clock.advance(10)
    runs.append(RunFact(1, "lab", "s1", "failed", clock.now()))
    flags = detect_stuck(runs=runs, starts=starts, now=clock.now(), settings=SETTINGS)
    assert flags[1].reasons == ("failing",) and flags[1].failures_in_a_row == 3


def test_passing_clears_the_flag_and_the_next_step_becomes_current() -> None:
    clock = TestClock()
    starts = [StartFact(1, "lab", "s1", clock.now())]
    runs = [RunFact(1, "lab", "s1", "failed", clock.now()) for _ in range(4)]
    assert 1 in detect_stuck(runs=runs, starts=starts, now=clock.now(), settings=SETTINGS)
    clock.advance(60)
    runs.append(RunFact(1, "lab", "s1", "passed", clock.now()))
    assert detect_stuck(runs=runs, starts=starts, now=clock.now(), settings=SETTINGS) == {}
    clock.advance(5)
    starts.append(StartFact(1, "lab", "s2", clock.now()))
    clock.advance(3600)
    flags = detect_stuck(
        runs=runs, starts=starts, now=clock.now(), settings=SETTINGS, expected_s={("lab", "s2"): 60.0}
    )
    assert (flags[1].step, flags[1].reasons) == ("s2", ("slow",))


def test_both_reasons_are_reported_together() -> None:
    clock = TestClock()
    starts = [StartFact(1, "lab", "s1", clock.now())]
    clock.advance(3600)
    runs = [RunFact(1, "lab", "s1", "failed", clock.now()) for _ in range(3)]
    flags = detect_stuck(
        runs=runs, starts=starts, now=clock.now(), settings=SETTINGS, expected_s={("lab", "s1"): 60.0}
    )
    assert flags[1].reasons == ("slow", "failing")


def test_thresholds_come_from_settings() -> None:
    clock = TestClock()
    starts = [StartFact(1, "lab", "s1", clock.now())]
    runs = [RunFact(1, "lab", "s1", "failed", clock.now()) for _ in range(2)]
    assert detect_stuck(runs=runs, starts=starts, now=clock.now(), settings=SETTINGS) == {}
    strict = StuckSettings(time_factor=2.0, min_seconds=300.0, failed_in_a_row=2)
    assert set(detect_stuck(runs=runs, starts=starts, now=clock.now(), settings=strict)) == {1}


def test_failures_in_a_row_counts_back_to_the_last_pass() -> None:
    assert failures_in_a_row(["failed", "passed", "failed", "timeout", "failed"]) == 2
    assert failures_in_a_row([]) == 0
