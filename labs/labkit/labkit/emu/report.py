"""The run report of an emulation session: a table for people, JSON for checkers."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from .memory import fmt_bytes


@dataclass
class OpStats:
    """Totals for one op kind (all calls of ``account(op, ...)`` with the same ``op``)."""

    op: str
    count: int = 0
    launches: int = 0
    fused: int = 0
    flops: float = 0.0
    bytes: float = 0.0
    time_ms: float = 0.0
    engine: str = "device"
    #: how many calls were compute-, memory- or launch-bound
    bound: dict[str, int] = field(default_factory=dict)


@dataclass
class StreamRow:
    stream: str
    ops: int
    busy_ms: float
    end_ms: float


@dataclass
class EmuReport:
    """What a session measured. ``mode`` is ``"emulated"`` (cost model, deterministic) or
    ``"measured"`` (real NPU: ``elapsed_ms`` from synchronize + timers; per-op ``time_ms``
    is then 0 because ops are not timed one by one)."""

    profile: str
    mode: str
    scale: float
    graph_mode: bool
    elapsed_ms: float
    ops: dict[str, OpStats]
    streams: dict[str, StreamRow]
    engines_busy_ms: dict[str, float]
    h2d_bytes: int
    d2h_bytes: int
    launches: int
    peak_memory_bytes: int
    capacity_bytes: int
    peak_by_tag: dict[str, int]
    used_by_tag: dict[str, int]

    def time_by_op(self) -> dict[str, float]:
        """Emulated milliseconds per op kind, largest first."""
        return {k: v.time_ms for k, v in sorted(self.ops.items(), key=lambda kv: (-kv[1].time_ms, kv[0]))}

    def time_by_stream(self) -> dict[str, float]:
        return {k: v.busy_ms for k, v in self.streams.items()}

    @property
    def serial_ms(self) -> float:
        """Sum of every op's time: what ``elapsed_ms`` would be with no overlap at all."""
        return sum(v.time_ms for v in self.ops.values())

    @property
    def overlap_ms(self) -> float:
        """Time saved by streams overlapping (``serial_ms - elapsed_ms``, never negative)."""
        return max(0.0, self.serial_ms - self.elapsed_ms) if self.mode == "emulated" else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["serial_ms"] = self.serial_ms
        d["overlap_ms"] = self.overlap_ms
        return d

    def to_json(self, **kwargs: Any) -> str:
        """The whole report as a JSON string (``json.loads`` gives :meth:`to_dict`)."""
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_json(cls, text: str) -> EmuReport:
        d = json.loads(text)
        d.pop("serial_ms", None)
        d.pop("overlap_ms", None)
        d["ops"] = {k: OpStats(**v) for k, v in d["ops"].items()}
        d["streams"] = {k: StreamRow(**v) for k, v in d["streams"].items()}
        return cls(**d)

    def __str__(self) -> str:
        lines = [
            f"labkit.emu report: profile {self.profile}, {self.mode}, scale {self.scale:g}, "
            f"graph_mode {self.graph_mode}",
            f"elapsed {self.elapsed_ms:.3f} ms (serial {self.serial_ms:.3f} ms, overlap saved "
            f"{self.overlap_ms:.3f} ms), {self.launches} launches",
            "",
            f"{'op':<32} {'engine':<7} {'calls':>6} {'launch':>6} {'GFLOP':>9} {'MB':>9} {'ms':>9} {'%':>5}",
        ]
        total = self.serial_ms or 1.0
        for name, t in self.time_by_op().items():
            o = self.ops[name]
            lines.append(
                f"{name[:32]:<32} {o.engine:<7} {o.count:>6} {o.launches:>6} {o.flops / 1e9:>9.4f} "
                f"{o.bytes / 1e6:>9.3f} {t:>9.3f} {100 * t / total:>5.1f}"
            )
        lines.append("")
        lines.append(f"{'stream':<32} {'ops':>6} {'busy ms':>9} {'ends at ms':>11}")
        for s in self.streams.values():
            lines.append(f"{s.stream[:32]:<32} {s.ops:>6} {s.busy_ms:>9.3f} {s.end_ms:>11.3f}")
        lines.append("")
        lines.append(
            f"H2D {fmt_bytes(self.h2d_bytes)}, D2H {fmt_bytes(self.d2h_bytes)}; peak device memory "
            f"{fmt_bytes(self.peak_memory_bytes)} of {fmt_bytes(self.capacity_bytes)}"
        )
        for tag, n in list(self.peak_by_tag.items())[:8]:
            lines.append(f"  at peak: {tag:<28} {fmt_bytes(n):>12}")
        return "\n".join(lines)
