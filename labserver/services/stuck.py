"""Stuck detection: a pure function of check runs, step starts and the time now.

An attendee is on one *current step*: of the steps they opened or checked and have not passed, the one
they started last. They are flagged on that step when

- **slow**: their time on it is at least ``time_factor`` x the room's typical time for that step, and at
  least ``min_seconds``. The typical time is the median time-to-pass of the attendees who passed the
  step (start to first pass) once ``MIN_SAMPLES`` of them have; before that, the step's expected time
  from the lab's ``duration_min`` spread evenly over its steps (``expected_s``), when given;
- **failing**: their last ``failed_in_a_row`` finished checks of it all failed. A checker *error* or
  timeout is the checker's fault, not the attendee's: it neither counts nor breaks the run of failures.

Nothing here reads the database or the clock: callers pass facts and ``now`` (``clock.now()``), so
tests move a :class:`~labserver.clock.TestClock` and call again.
"""

from __future__ import annotations

import datetime as dt
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from labserver.config import StuckSettings

MIN_SAMPLES = 3  # passes needed before the room's median replaces the lab's expected time

StepKey = tuple[str, str]  # (lab_id, step_id)


@dataclass(frozen=True)
class RunFact:
    attendee_id: int
    lab: str
    step: str
    status: str  # running | passed | failed | error | timeout
    at: dt.datetime  # when it finished (or started, while running)


@dataclass(frozen=True)
class StartFact:
    attendee_id: int
    lab: str
    step: str
    at: dt.datetime


@dataclass(frozen=True)
class StuckFlag:
    attendee_id: int
    lab: str
    step: str
    reasons: tuple[str, ...]  # "slow" and/or "failing"
    seconds_on_step: float
    typical_s: float | None  # the room's median (or the expected time) it was compared with
    failures_in_a_row: int
    detail: dict[str, float | int | None] = field(default_factory=dict)


@dataclass
class _Track:
    start: dt.datetime | None = None
    first_pass: dt.datetime | None = None
    statuses: list[str] = field(default_factory=list)  # finished runs, in order

    def begin(self, at: dt.datetime) -> None:
        if self.start is None or at < self.start:
            self.start = at


def _tracks(runs: Iterable[RunFact], starts: Iterable[StartFact]) -> dict[int, dict[StepKey, _Track]]:
    out: dict[int, dict[StepKey, _Track]] = {}
    for s in starts:
        out.setdefault(s.attendee_id, {}).setdefault((s.lab, s.step), _Track()).begin(s.at)
    for r in sorted(runs, key=lambda r: r.at):
        track = out.setdefault(r.attendee_id, {}).setdefault((r.lab, r.step), _Track())
        track.begin(r.at)
        if r.status == "running":
            continue
        track.statuses.append(r.status)
        if r.status == "passed" and track.first_pass is None:
            track.first_pass = r.at
    return out


def failures_in_a_row(statuses: list[str]) -> int:
    """Trailing failed checks, skipping checker errors and timeouts; a pass ends the count."""
    count = 0
    for status in reversed(statuses):
        if status == "failed":
            count += 1
        elif status == "passed":
            break
    return count


def typical_times(
    tracks: Mapping[int, Mapping[StepKey, _Track]], expected_s: Mapping[StepKey, float] | None = None
) -> dict[StepKey, float]:
    """The typical seconds to pass each step: the median over the room once MIN_SAMPLES passed it,
    else the expected time when one is given."""
    samples: dict[StepKey, list[float]] = {}
    for steps in tracks.values():
        for key, t in steps.items():
            if t.first_pass is not None and t.start is not None:
                samples.setdefault(key, []).append(max(0.0, (t.first_pass - t.start).total_seconds()))
    out: dict[StepKey, float] = dict(expected_s or {})
    for key, values in samples.items():
        if len(values) >= MIN_SAMPLES:
            out[key] = statistics.median(values)
    return out


def detect_stuck(
    *,
    runs: Iterable[RunFact],
    starts: Iterable[StartFact],
    now: dt.datetime,
    settings: StuckSettings,
    expected_s: Mapping[StepKey, float] | None = None,
) -> dict[int, StuckFlag]:
    """Flags by attendee id (only attendees who are stuck appear)."""
    tracks = _tracks(runs, starts)
    typical = typical_times(tracks, expected_s)
    flags: dict[int, StuckFlag] = {}
    for attendee_id, steps in tracks.items():
        open_steps = [(t.start, key) for key, t in steps.items() if t.first_pass is None and t.start]
        if not open_steps:
            continue
        start, key = max(open_steps)
        track = steps[key]
        assert start is not None
        on_step = max(0.0, (now - start).total_seconds())
        reasons: list[str] = []
        usual = typical.get(key)
        if usual is not None and on_step >= max(settings.time_factor * usual, settings.min_seconds):
            reasons.append("slow")
        fails = failures_in_a_row(track.statuses)
        if settings.failed_in_a_row > 0 and fails >= settings.failed_in_a_row:
            reasons.append("failing")
        if reasons:
            flags[attendee_id] = StuckFlag(
                attendee_id=attendee_id,
                lab=key[0],
                step=key[1],
                reasons=tuple(reasons),
                seconds_on_step=on_step,
                typical_s=usual,
                failures_in_a_row=fails,
            )
    return flags
