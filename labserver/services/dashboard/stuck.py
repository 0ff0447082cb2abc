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
from labserver.models import NOT_ATTEMPTS

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
class StepSummary:
    """One attendee on one step, summarized: what :func:`detect_stuck_steps` needs (the room service
    builds these with one aggregate query)."""

    attendee_id: int
    lab: str
    step: str
    start: dt.datetime | None = None  # opened the step, or first checked it
    first_pass: dt.datetime | None = None
    failed_in_a_row: int = 0  # trailing failed checks (errors skipped)


def summarize(runs: Iterable[RunFact], starts: Iterable[StartFact]) -> list[StepSummary]:
    out: dict[tuple[int, str, str], StepSummary] = {}
    statuses: dict[tuple[int, str, str], list[str]] = {}

    def track(attendee_id: int, lab: str, step: str, at: dt.datetime) -> StepSummary:
        key = (attendee_id, lab, step)
        summary = out.setdefault(key, StepSummary(attendee_id, lab, step))
        if summary.start is None or at < summary.start:
            summary.start = at
        return summary

    for s in starts:
        track(s.attendee_id, s.lab, s.step, s.at)
    for r in sorted(runs, key=lambda r: r.at):
        summary = track(r.attendee_id, r.lab, r.step, r.at)
        if r.status in NOT_ATTEMPTS:  # running, or the platform's fault: no attempt
            continue
        statuses.setdefault((r.attendee_id, r.lab, r.step), []).append(r.status)
        if r.status == "passed" and summary.first_pass is None:
            summary.first_pass = r.at
    for key, summary in out.items():
        summary.failed_in_a_row = failures_in_a_row(statuses.get(key, []))
    return list(out.values())


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
    steps: Iterable[StepSummary], expected_s: Mapping[StepKey, float] | None = None
) -> dict[StepKey, float]:
    """The typical seconds to pass each step: the median over the room once MIN_SAMPLES passed it,
    else the expected time when one is given."""
    samples: dict[StepKey, list[float]] = {}
    for t in steps:
        if t.first_pass is not None and t.start is not None:
            samples.setdefault((t.lab, t.step), []).append(max(0.0, (t.first_pass - t.start).total_seconds()))
    out: dict[StepKey, float] = dict(expected_s or {})
    for key, values in samples.items():
        if len(values) >= MIN_SAMPLES:
            out[key] = statistics.median(values)
    return out


def detect_stuck_steps(
    steps: Iterable[StepSummary],
    *,
    now: dt.datetime,
    settings: StuckSettings,
    expected_s: Mapping[StepKey, float] | None = None,
) -> dict[int, StuckFlag]:
    """Flags by attendee id (only attendees who are stuck appear), from per-step summaries."""
    steps = list(steps)
    typical = typical_times(steps, expected_s)
    current: dict[int, StepSummary] = {}
    for t in steps:
        if t.first_pass is None and t.start is not None:
            best = current.get(t.attendee_id)
            if best is None or (t.start, t.lab, t.step) > (best.start, best.lab, best.step):  # type: ignore[operator]
                current[t.attendee_id] = t
    flags: dict[int, StuckFlag] = {}
    for attendee_id, t in current.items():
        assert t.start is not None
        on_step = max(0.0, (now - t.start).total_seconds())
        reasons: list[str] = []
        usual = typical.get((t.lab, t.step))
        if usual is not None and on_step >= max(settings.time_factor * usual, settings.min_seconds):
            reasons.append("slow")
        if settings.failed_in_a_row > 0 and t.failed_in_a_row >= settings.failed_in_a_row:
            reasons.append("failing")
        if reasons:
            flags[attendee_id] = StuckFlag(
                attendee_id=attendee_id,
                lab=t.lab,
                step=t.step,
                reasons=tuple(reasons),
                seconds_on_step=on_step,
                typical_s=usual,
                failures_in_a_row=t.failed_in_a_row,
            )
    return flags


def detect_stuck(
    *,
    runs: Iterable[RunFact],
    starts: Iterable[StartFact],
    now: dt.datetime,
    settings: StuckSettings,
    expected_s: Mapping[StepKey, float] | None = None,
) -> dict[int, StuckFlag]:
    """Flags by attendee id (only attendees who are stuck appear), from raw check runs and starts."""
    return detect_stuck_steps(summarize(runs, starts), now=now, settings=settings, expected_s=expected_s)
