"""Stream timelines: when each accounted op starts and ends in emulated time.

Rules (deterministic list scheduling in program order):

- every stream has a clock (when its last op ends); ops on one stream run in order;
- every engine (``device`` AI cores, ``host`` CPU, ``h2d`` and ``d2h`` copy engines) runs
  one op at a time, so two streams both computing on the device do not overlap, while a
  copy or a CPU computation on a side stream does overlap device compute on the main stream;
- an op issued on a side stream starts no earlier than the clock of the stream that was
  current when the side stream was entered (the program cannot issue work from the past);
- ``synchronize()`` brings every stream to the latest clock; ``wait_event`` brings one
  stream to the time an event was recorded.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MAIN = "main"


@dataclass(frozen=True)
class Event:
    """A point on a stream's timeline (``record_event``); streams can wait for it."""

    stream: str
    time_s: float


@dataclass
class StreamStats:
    busy_s: float = 0.0
    ops: int = 0


@dataclass
class Timeline:
    clocks: dict[str, float] = field(default_factory=lambda: {MAIN: 0.0})
    engine_free: dict[str, float] = field(default_factory=dict)
    stats: dict[str, StreamStats] = field(default_factory=dict)

    def clock(self, stream: str) -> float:
        return self.clocks.get(stream, 0.0)

    def issue(
        self, stream: str, engine: str, duration_s: float, not_before: float = 0.0
    ) -> tuple[float, float]:
        """Place an op of ``duration_s`` on ``stream`` using ``engine``; returns (start, end)."""
        start = self.clocks.get(stream, 0.0)
        free = self.engine_free.get(engine, 0.0)
        if free > start:
            start = free
        if not_before > start:
            start = not_before
        end = start + duration_s
        self.clocks[stream] = end
        self.engine_free[engine] = end
        st = self.stats.get(stream)
        if st is None:
            st = self.stats[stream] = StreamStats()
        st.busy_s += duration_s
        st.ops += 1
        return start, end

    def synchronize(self) -> float:
        t = self.elapsed()
        for name in self.clocks:
            self.clocks[name] = t
        return t

    def record(self, stream: str) -> Event:
        return Event(stream, self.clock(stream))

    def wait(self, stream: str, event: Event) -> None:
        self.clocks[stream] = max(self.clock(stream), event.time_s)

    def elapsed(self) -> float:
        """Makespan: the latest clock of any stream (work on side streams counts once done)."""
        return max(self.clocks.values(), default=0.0)
