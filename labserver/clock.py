"""The one source of time. Culling, pacing and "stuck" logic read ``now()`` so tests move a
:class:`TestClock` instead of sleeping."""

from __future__ import annotations

import datetime as dt
import time


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class Clock:
    def now(self) -> dt.datetime:
        """Aware UTC."""
        return _utcnow()

    def monotonic(self) -> float:
        return time.monotonic()


class TestClock(Clock):
    __test__ = False  # not a pytest class

    def __init__(self, start: dt.datetime | None = None) -> None:
        self._now = start or dt.datetime(2026, 1, 1, 9, 0, 0, tzinfo=dt.UTC)
        self._mono = 0.0

    def now(self) -> dt.datetime:
        return self._now

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float) -> None:
        self._now += dt.timedelta(seconds=seconds)
        self._mono += seconds


_clock: Clock = Clock()


def now() -> dt.datetime:
    return _clock.now()


def monotonic() -> float:
    return _clock.monotonic()


def use(clock: Clock) -> Clock:
    """Install ``clock`` (tests); returns the previous one."""
    global _clock
    previous, _clock = _clock, clock
    return previous
